"""A background response as Responses stream events (`background: true` with `stream: true`,
and `GET /v1/responses/{id}?stream=true&starting_after=N` to pick it up again), as OpenAI
streams one: `response.created` and `response.queued` (the Response queued), then
`response.in_progress`, then the output — each item added, its text (or a function call's
arguments) as one delta and its done events, the item done — and the end: `response.completed`,
`response.incomplete` or `response.failed` with the whole Response.

The job runs the call whole (jobs/background_responses.py), so the output comes in one piece
when it is done, not token by token. Sequence numbers are the same on every reading of one
response, so a client that kept the last one it saw resumes after it (`starting_after`). A
response cancelled meanwhile ends the stream with an `error` event (`response_cancelled`):
OpenAI's stream has no event for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

#: How often the job is read while the response is not done.
POLL_S: Final = 0.5
_ENDINGS: Final = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}

#: Reads the response as it stands now (None: it is gone, expired).
Read = Callable[[], Awaitable[dict[str, Any] | None]]


async def events(
    read: Read, first: dict[str, Any], starting_after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """The response's events after `starting_after`, until it is done. `first` is how it
    stood when the stream was asked for."""
    queued = {**first, "status": "queued", "output": [], "usage": None}
    head = [
        {"type": "response.created", "response": queued},
        {"type": "response.queued", "response": queued},
    ]
    sequence = 0
    for event in head:
        if starting_after is None or sequence > starting_after:
            yield {**event, "sequence_number": sequence}
        sequence += 1
    found: dict[str, Any] | None = first
    while found is not None and found.get("status") == "queued":
        await asyncio.sleep(POLL_S)
        found = await read()
    if found is None:
        yield _error("response_expired", "the response expired", sequence)
        return
    running = {**found, "status": "in_progress", "output": [], "usage": None}
    if starting_after is None or sequence > starting_after:
        yield {"type": "response.in_progress", "response": running, "sequence_number": sequence}
    sequence += 1
    while found is not None and found.get("status") == "in_progress":
        await asyncio.sleep(POLL_S)
        found = await read()
    if found is None:
        yield _error("response_expired", "the response expired", sequence)
        return
    ending = _ENDINGS.get(str(found.get("status")))
    if ending is None:  # cancelled
        yield _error("response_cancelled", "the response was cancelled", sequence)
        return
    for event in [*output_events(found), {"type": ending, "response": found}]:
        if starting_after is None or sequence > starting_after:
            yield {**event, "sequence_number": sequence}
        sequence += 1


def output_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that build the response's output, item by item."""
    found: list[dict[str, Any]] = []
    for index, item in enumerate(response.get("output") or []):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            found.append(_added(index, {**item, "status": "in_progress", "content": []}))
            for position, part in enumerate(item.get("content") or []):
                found.extend(_part(index, str(item.get("id")), position, part))
        elif kind == "function_call":
            arguments = str(item.get("arguments") or "")
            where = {"item_id": item.get("id"), "output_index": index}
            found.append(_added(index, {**item, "status": "in_progress", "arguments": ""}))
            found.append(
                {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
            )
            found.append(
                {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
            )
        else:
            found.append(_added(index, item))
        found.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return found


def _added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def _part(index: int, item_id: str, position: int, part: Any) -> list[dict[str, Any]]:
    if not isinstance(part, dict):
        return []
    where = {"item_id": item_id, "output_index": index, "content_index": position}
    kind = part.get("type")
    found: list[dict[str, Any]] = []
    if kind == "output_text":
        text = str(part.get("text") or "")
        found.append({"type": "response.content_part.added", **where, "part": {**part, "text": ""}})
        found.append({"type": "response.output_text.delta", **where, "delta": text, "logprobs": []})
        found.append({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
    elif kind == "refusal":
        refusal = str(part.get("refusal") or "")
        empty = {**part, "refusal": ""}
        found.append({"type": "response.content_part.added", **where, "part": empty})
        found.append({"type": "response.refusal.delta", **where, "delta": refusal})
        found.append({"type": "response.refusal.done", **where, "refusal": refusal})
    else:
        found.append({"type": "response.content_part.added", **where, "part": part})
    found.append({"type": "response.content_part.done", **where, "part": part})
    return found


def _error(code: str, message: str, sequence: int) -> dict[str, Any]:
    return {
        "type": "error",
        "code": code,
        "message": message,
        "param": None,
        "sequence_number": sequence,
    }

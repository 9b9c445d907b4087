"""The data plane's side of a background response's creation and stream (off the common
path: responses.py calls it only for `background: true`, responses_stored.py only for a
background response's id). The job itself is queued, read and cancelled by the durable jobs
(`Dispatcher.durable`, gateway/durable.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay.gateway.asgi import SSE_HEADERS, send_json
from llmrelay.gateway.auth import key_digest, presented_key
from llmrelay.gateway.durable import DurableJobs
from llmrelay.gateway.errors import ClientDisconnected, InvalidRequest
from llmrelay.gateway.ingress import RequestContext
from llmrelay.gateway.watch import ClientWatches
from llmrelay.snapshot.model import KeySnap, ModelSnap


async def submit_background(
    durable: DurableJobs | None,
    scope: Scope,
    principal: KeySnap,
    model: ModelSnap,
    payload: dict[str, Any],
    context: RequestContext,
    guard_hits: list[tuple[Any, ...]] | None,
) -> dict[str, Any]:
    """Queue the response (its body as the key's guardrails left it, their hits kept for
    the job's record): the Response object, `queued`. Raises gateway errors."""
    if durable is None:
        raise InvalidRequest(
            "background responses need durable jobs, which this gateway does not run",
            param="background",
            code="unsupported_parameter",
        )
    digest = key_digest(presented_key(scope["headers"]) or "")
    return await durable.submit_response(
        principal, digest, model, payload, context, guard_hits or ()
    )


async def answer_background(
    durable: DurableJobs,
    receive: Receive,
    send: Send,
    principal: KeySnap,
    queued: dict[str, Any],
    stream: bool,
    headers: list[tuple[bytes, bytes]],
    watches: ClientWatches,
) -> None:
    """Answer a queued response: as it is, or (`stream`) its events until it is done."""
    events = None
    if stream:
        response_id = str(queued["id"])
        events = await durable.response_events(principal, response_id, starting_after=None)
    if events is None:
        await send_json(send, 200, orjson.dumps(queued), headers)
        return
    await send_events(receive, send, events, headers, watches)


async def send_events(
    receive: Receive,
    send: Send,
    events: AsyncIterator[dict[str, Any]],
    headers: list[tuple[bytes, bytes]],
    watches: ClientWatches,
) -> None:
    """Server-sent events as the Responses API writes them (`event:` and `data:` lines),
    until the last; a client that leaves stops the stream, never the response."""
    try:
        start = {"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *headers]}
        await send(start)
        with watches.watch(receive):
            async for event in events:
                kind = str(event.get("type", "")).encode()
                body = b"event: " + kind + b"\ndata: " + orjson.dumps(event) + b"\n\n"
                await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except (ClientDisconnected, OSError):
        pass  # nothing more can reach the client; the job goes on
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()

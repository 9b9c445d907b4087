"""A background response's stream events: the same numbers on every reading, resumed after
the last one seen, the output built item by item, and an error event for a cancelled one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llmrelay.jobs import response_stream

QUEUED: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "status": "queued",
    "output": [],
    "usage": None,
}
DONE: dict[str, Any] = {
    **QUEUED,
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "f",
            "arguments": '{"a": 1}',
            "status": "completed",
        },
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}


def reads(*states: dict[str, Any] | None) -> response_stream.Read:
    found: Iterator[dict[str, Any] | None] = iter(states)

    async def read() -> dict[str, Any] | None:
        return next(found)

    return read


async def collect(
    read: response_stream.Read, first: dict[str, Any], after: int | None
) -> list[dict[str, Any]]:
    return [event async for event in response_stream.events(read, first, after)]


async def test_every_reading_numbers_the_events_alike(monkeypatch: Any) -> None:
    monkeypatch.setattr(response_stream, "POLL_S", 0)
    live = await collect(reads({**QUEUED, "status": "in_progress"}, DONE), QUEUED, None)
    kinds = [e["type"] for e in live]
    assert kinds == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in live] == list(range(len(live)))
    assert live[5]["delta"] == "hello" and live[10]["delta"] == '{"a": 1}'
    assert live[3]["item"]["content"] == [] and live[-1]["response"] == DONE
    later = await collect(reads(), DONE, 4)  # read after it was done, from event 5
    assert later == live[5:]


async def test_a_cancelled_or_expired_response_ends_with_an_error(monkeypatch: Any) -> None:
    monkeypatch.setattr(response_stream, "POLL_S", 0)
    cancelled = await collect(reads({**QUEUED, "status": "cancelled"}), QUEUED, None)
    assert cancelled[-1]["type"] == "error" and cancelled[-1]["code"] == "response_cancelled"
    expired = await collect(reads(None), QUEUED, 1)
    assert [e["type"] for e in expired] == ["error"] and expired[0]["code"] == "response_expired"

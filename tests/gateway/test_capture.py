"""Payload capture: the bodies that pass through a request's `send` and `receive`, capped,
with their sizes; and their rows written with the records, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import Message

from llmrelay.gateway import recorder as recorder_module
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.capture import PAYLOAD_COLUMNS, Capture
from llmrelay.gateway.recorder import Recorder
from llmrelay.store.db import session_factory
from llmrelay.store.models import RequestPayload, RequestRecord


class Peer:
    """The server's side of one request: the messages it hands to `receive` and takes from
    `send`."""

    def __init__(self, *incoming: Message) -> None:
        self.incoming: Iterator[Message] = iter(incoming)
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        return next(self.incoming)

    async def send(self, message: Message) -> None:
        self.sent.append(message)


def _request(*chunks: bytes) -> list[Message]:
    last = len(chunks) - 1
    return [
        {"type": "http.request", "body": chunk, "more_body": i < last}
        for i, chunk in enumerate(chunks)
    ]


def _fields(capture: Capture) -> dict[str, Any]:
    return dict(zip(PAYLOAD_COLUMNS, capture.row("req-1", 1.5), strict=True))


async def _exchange(capture: Capture, peer: Peer, *answer: bytes) -> None:
    send, receive = capture.wrap(peer.send, peer.receive)
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for i, chunk in enumerate(answer):
        await send({"type": "http.response.body", "body": chunk, "more_body": i < len(answer) - 1})


async def test_bodies_are_kept_as_they_passed_and_the_server_got_every_message() -> None:
    capture = Capture(limit=100)
    peer = Peer(*_request(b'{"a":', b' "\xc3\xa9"}'))
    await _exchange(capture, peer, b"data: 1\n\n", b"", b"data: [DONE]\n\n")
    assert _fields(capture) == {
        "request_id": "req-1",
        "created_at": 1.5,
        "request_body": b'{"a": "\xc3\xa9"}',
        "response_body": b"data: 1\n\ndata: [DONE]\n\n",
        "request_truncated": False,
        "response_truncated": False,
        "request_bytes": 11,
        "response_bytes": 23,
    }
    assert [m["type"] for m in peer.sent] == ["http.response.start"] + ["http.response.body"] * 3


@pytest.mark.parametrize("size", [99, 100, 101, 250])
async def test_each_body_is_cut_at_exactly_the_cap_with_its_full_size(size: int) -> None:
    body = bytes(range(256))[:size]
    capture = Capture(limit=100)
    await _exchange(capture, Peer(*_request(body[:33], body[33:])), body[:70], body[70:])
    fields = _fields(capture)
    assert fields["request_body"] == body[:100] and fields["response_body"] == body[:100]
    assert fields["request_bytes"] == fields["response_bytes"] == size
    assert fields["request_truncated"] is fields["response_truncated"] is (size > 100)


async def test_a_body_never_read_to_its_end_and_an_answer_never_started_are_none() -> None:
    capture = Capture(limit=100)
    _, receive = capture.wrap(Peer().send, Peer(*_request(b"part", b"rest")).receive)
    await receive()  # refused as too large after the first chunk, say
    fields = _fields(capture)
    assert (fields["request_body"], fields["request_bytes"]) == (None, None)
    assert (fields["response_body"], fields["response_bytes"]) == (None, None)
    assert fields["request_truncated"] is fields["response_truncated"] is False


async def test_a_disconnect_is_passed_on_and_not_kept() -> None:
    capture = Capture()
    peer = Peer(*_request(b"{}"), {"type": "http.disconnect"})
    _, receive = capture.wrap(peer.send, peer.receive)
    await receive()
    assert await receive() == {"type": "http.disconnect"}
    assert _fields(capture)["request_body"] == b"{}"


# -- written with the records ------------------------------------------------------------------


async def captured_record(
    request_id: str, request: bytes, response: bytes, limit: int
) -> CallRecord:
    record = CallRecord(request_id, "chat.completions", time.perf_counter())
    record.capture = Capture(limit)
    await _exchange(record.capture, Peer(*_request(request)), response)
    return record


def payload_row(record: CallRecord) -> tuple[Any, ...]:
    assert record.capture is not None
    return record.capture.row(record.request_id, record.created)


async def test_payload_rows_go_with_their_records_once_each(engine: AsyncEngine) -> None:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    binary = bytes(range(256)) * 3
    records = [
        await captured_record("cap-text", b'{"model":"m"}', b'{"ok":true}', 1000),
        await captured_record("cap-binary", binary, binary[:10], 500),
    ]
    plain = CallRecord("plain", "chat.completions", time.perf_counter())
    for record in records:
        recorder.record(record.row(1.0), None, payload_row(record))
    recorder.record(plain.row(1.0))
    recorder.record(records[0].row(1.0), None, payload_row(records[0]))  # again: kept once
    await recorder.stop(timeout_s=10)
    async with session_factory(engine)() as session:
        payloads = {p.request_id: p for p in (await session.scalars(select(RequestPayload)))}
        kept = {r.request_id for r in (await session.scalars(select(RequestRecord)))}
    assert kept == {"cap-text", "cap-binary", "plain"}
    assert set(payloads) == {"cap-text", "cap-binary"}
    text, cut = payloads["cap-text"], payloads["cap-binary"]
    assert (text.request_body, text.response_body) == (b'{"model":"m"}', b'{"ok":true}')
    assert (text.request_truncated, text.response_truncated) == (False, False)
    assert (cut.request_body, cut.request_truncated, cut.request_bytes) == (binary[:500], True, 768)
    assert (cut.response_body, cut.response_bytes) == (binary[:10], 10)
    assert text.created_at == next(
        r.created_at for r in await _records(engine) if r.request_id == "cap-text"
    )


async def _records(engine: AsyncEngine) -> list[RequestRecord]:
    async with session_factory(engine)() as session:
        return list((await session.scalars(select(RequestRecord))).all())


async def test_past_the_memory_bound_a_payload_is_dropped_and_its_record_kept(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder_module, "MAX_QUEUED_PAYLOAD_BYTES", 1500)
    recorder = Recorder(engine, gather_s=0.5)
    recorder.start()
    for i in range(3):
        record = await captured_record(f"big-{i}", b"x" * 600, b"y" * 100, 1000)
        recorder.record(record.row(1.0), None, payload_row(record))
    await recorder.stop(timeout_s=10)
    assert recorder.payloads_dropped == 1
    async with session_factory(engine)() as session:
        payloads = (await session.scalars(select(RequestPayload.request_id))).all()
    assert sorted(payloads) == ["big-0", "big-1"]
    assert len(await _records(engine)) == 3

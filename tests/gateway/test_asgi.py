"""The data plane's body read: its cap, its deadline, and a cancellation that is not the
deadline's going on as it came."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.asgi import read_body
from llmrelay.gateway.errors import PayloadTooLarge, RequestTimeout


def _deadlines() -> Deadlines:
    return Deadlines(asyncio.get_running_loop(), interval_s=0.02)


def _receiver(*messages: Message, then_wait: bool = False) -> object:
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then_wait:
            await asyncio.Event().wait()  # the rest of the body never comes
        return {"type": "http.disconnect"}

    return receive


async def test_a_body_in_pieces_is_joined() -> None:
    receive = _receiver(
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
    )
    assert await read_body(receive, 10, 5.0, _deadlines()) == b"abcd"  # type: ignore[arg-type]


async def test_a_body_past_the_cap_is_413() -> None:
    receive = _receiver(
        {"type": "http.request", "body": b"abcdef", "more_body": True},
        {"type": "http.request", "body": b"ghijkl", "more_body": False},
    )
    with pytest.raises(PayloadTooLarge):
        await read_body(receive, 10, 5.0, _deadlines())  # type: ignore[arg-type]


async def test_a_body_that_stops_coming_is_408_with_the_connection_closed() -> None:
    receive = _receiver({"type": "http.request", "body": b"ab", "more_body": True}, then_wait=True)
    started = asyncio.get_running_loop().time()
    with pytest.raises(RequestTimeout) as caught:
        await read_body(receive, 10, 0.2, _deadlines())  # type: ignore[arg-type]
    assert 0.2 <= asyncio.get_running_loop().time() - started < 1
    assert caught.value.status == 408
    assert caught.value.headers == {"Connection": "close"}
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0  # nothing left cancelled


async def test_a_cancellation_from_elsewhere_is_not_taken_for_the_deadline() -> None:
    receive = _receiver(then_wait=True)
    task = asyncio.create_task(read_body(receive, 10, 5.0, _deadlines()))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_deadline_timer_is_gone_once_the_body_is_read() -> None:
    receive = _receiver({"type": "http.request", "body": b"ab", "more_body": False})
    assert await read_body(receive, 10, 0.05, _deadlines()) == b"ab"  # type: ignore[arg-type]
    await asyncio.sleep(0.1)  # a timer left behind would cancel this task now

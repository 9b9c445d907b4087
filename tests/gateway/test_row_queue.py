"""The recorder's queue: bounded, FIFO, and a waiting consumer wakes on the first put."""

from __future__ import annotations

import asyncio
import contextlib

from llmrelay.gateway.row_queue import RowQueue


def test_put_refuses_rows_past_the_bound() -> None:
    queue = RowQueue(2)
    assert queue.put((1,)) and queue.put((2,))
    assert not queue.put((3,))
    assert len(queue) == 2
    assert queue.take(10) == [(1,), (2,)]
    assert queue.put((4,))


def test_take_returns_the_oldest_rows_up_to_the_limit() -> None:
    queue = RowQueue(100)
    for n in range(5):
        queue.put((n,))
    assert queue.take(2) == [(0,), (1,)]
    assert queue.take(2) == [(2,), (3,)]
    assert queue.take(2) == [(4,)]
    assert queue.take(2) == []


async def test_wait_returns_at_once_when_rows_are_queued() -> None:
    queue = RowQueue(10)
    queue.put(("a",))
    await asyncio.wait_for(queue.wait(), 0.1)


async def test_a_waiting_consumer_wakes_on_the_first_put() -> None:
    queue = RowQueue(10)
    waiter = asyncio.create_task(queue.wait())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    queue.put(("row",))
    await asyncio.wait_for(waiter, 0.5)
    assert queue.take(1) == [("row",)]


async def test_a_cancelled_wait_leaves_no_stale_waiter_behind() -> None:
    queue = RowQueue(10)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(queue.wait(), 0.01)
    waiter = asyncio.create_task(queue.wait())
    await asyncio.sleep(0)
    queue.put(("late",))
    await asyncio.wait_for(waiter, 0.5)

"""The process-wide deadline sweeper cancels only waits that overstay their limit."""

import asyncio
import time

import pytest

from llmrelay.deadlines import Deadlines


async def test_a_wait_past_its_limit_is_cancelled_and_claimed() -> None:
    deadlines = Deadlines(asyncio.get_running_loop(), interval_s=0.02)
    entry = deadlines.watch(0.1, "first_byte")
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(60)
    assert entry.claim()
    assert entry.phase == "first_byte"
    assert 0.1 <= time.monotonic() - started < 30  # at its limit, not the sleep's minute
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0)  # the task carries on normally after a claimed cancellation


async def test_a_wait_within_its_limit_is_left_alone_and_stops_the_timer() -> None:
    deadlines = Deadlines(asyncio.get_running_loop(), interval_s=0.02)
    entry = deadlines.watch(2, "first_byte")
    await asyncio.sleep(0.01)
    entry.stop()
    await asyncio.sleep(2.2)  # past the limit, but no longer watched
    assert not entry.claim()


async def test_paused_time_does_not_count_and_resume_restarts_the_count() -> None:
    deadlines = Deadlines(asyncio.get_running_loop(), interval_s=0.02)
    entry = deadlines.watch(1.0, "stream_event")
    entry.pause()
    await asyncio.sleep(1.2)  # e.g. writing to a slow client: not the provider's silence
    entry.resume()
    await asyncio.sleep(0.01)  # the count starts again: far from the limit
    entry.pause()
    entry.change(0.05, "stream_event")
    entry.resume()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(60)
    assert entry.claim()
    entry.stop()


async def test_a_cancellation_from_elsewhere_is_not_claimed() -> None:
    deadlines = Deadlines(asyncio.get_running_loop(), interval_s=0.02)

    async def waits() -> bool:
        entry = deadlines.watch(10, "first_byte")
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return entry.claim()
        return True

    task = asyncio.create_task(waits())
    await asyncio.sleep(0.05)
    task.cancel()
    assert await task is False

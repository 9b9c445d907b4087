"""The loop-lag sampler on a real event loop: a loop that keeps up observes waits of well
under a millisecond; a callback that holds the loop shows up as the markers that waited."""

from __future__ import annotations

import asyncio
import time

from llmrelay.observability.loop_lag import LoopLagSampler


class _Waits:
    """The observed waits; `enough` is set once `wanted` of them arrived."""

    def __init__(self) -> None:
        self.seen: list[float] = []
        self.wanted = 0
        self.enough = asyncio.Event()

    def observe(self, wait: float) -> None:
        self.seen.append(wait)
        if len(self.seen) >= self.wanted:
            self.enough.set()

    async def until(self, count: int) -> None:
        self.wanted = count
        self.enough.clear()
        if len(self.seen) < count:
            await asyncio.wait_for(self.enough.wait(), 10)


async def _sample(block_s: float) -> list[float]:
    loop = asyncio.get_running_loop()
    waits = _Waits()
    sampler = LoopLagSampler(loop, waits.observe, interval_s=0.005)
    sampler.start()
    try:
        await waits.until(20)  # a loop that keeps up
        if block_s:
            loop.call_soon(time.sleep, block_s)  # a callback that holds the loop
        await waits.until(len(waits.seen) + 20)
    finally:
        sampler.stop()
    return waits.seen


async def test_a_loop_that_keeps_up_observes_short_waits() -> None:
    waits = await _sample(0)
    assert len(waits) >= 20
    # Markers arrive on an idle loop: their wait is the wake-up alone. Most well under a
    # millisecond; a shared machine may take the core now and then, so not all of them.
    assert sorted(waits)[len(waits) // 2] < 0.005


async def test_a_blocked_loop_shows_up_as_the_markers_that_waited() -> None:
    waits = await _sample(0.2)
    # Markers posted during the 200 ms the callback held the loop waited until it let go:
    # the first of them nearly all of it.
    assert max(waits) >= 0.1
    assert sum(1 for wait in waits if wait >= 0.02) >= 2


async def test_stop_ends_the_thread_and_the_samples() -> None:
    loop = asyncio.get_running_loop()
    waits: list[float] = []
    sampler = LoopLagSampler(loop, waits.append, interval_s=0.001)
    sampler.start()
    await asyncio.sleep(0.05)
    sampler.stop()
    await asyncio.sleep(0.02)  # markers already posted run now
    seen = len(waits)
    await asyncio.sleep(0.05)
    assert len(waits) == seen

"""Coalescing: a burst of change signals costs one refresh in flight and one queued."""

from __future__ import annotations

import asyncio

from llmrelay.snapshot.refresher import CoalescingRefresher


class Refresh:
    """A refresh that reads a "stored generation" and can be held at its start."""

    def __init__(self) -> None:
        self.stored = 0
        self.seen: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = asyncio.Event()
        self.fail_next = False

    async def __call__(self) -> None:
        self.started.set()
        seen = self.stored  # read before waiting, as a real refresh reads the generation
        await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("database went away")
        self.seen.append(seen)


async def test_a_burst_while_one_runs_becomes_exactly_one_more_run() -> None:
    refresh = Refresh()
    refresh.gate.clear()
    refresher = CoalescingRefresher(refresh)
    refresher.request()
    await refresh.started.wait()
    for generation in range(1, 11):  # ten changes land while the first refresh is held
        refresh.stored = generation
        refresher.request()
    refresh.gate.set()
    await refresher.idle()
    assert refresher.runs == 2
    # The held run had read the old generation; the queued one sees the last change.
    assert refresh.seen == [0, 10]


async def test_requests_after_a_run_finished_start_a_new_one() -> None:
    refresh = Refresh()
    refresher = CoalescingRefresher(refresh)
    refresher.request()
    await refresher.idle()
    refresh.stored = 5
    refresher.request()
    await refresher.idle()
    assert refresher.runs == 2
    assert refresh.seen == [0, 5]


async def test_never_two_refreshes_at_once() -> None:
    running = 0
    most = 0

    async def refresh() -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1

    refresher = CoalescingRefresher(refresh)
    for _ in range(5):
        for _ in range(20):
            refresher.request()
            await asyncio.sleep(0)
        await asyncio.sleep(0.005)
    await refresher.idle()
    assert most == 1
    assert 2 <= refresher.runs <= 10  # folded: far fewer than the 100 requests


async def test_a_failed_refresh_is_logged_and_the_next_request_runs() -> None:
    refresh = Refresh()
    refresh.fail_next = True
    refresher = CoalescingRefresher(refresh)
    refresher.request()
    await refresher.idle()
    assert refresh.seen == []
    refresher.request()
    await refresher.idle()
    assert refresh.seen == [0]


async def test_close_lets_the_refresh_in_flight_finish_and_takes_no_more() -> None:
    refresh = Refresh()
    refresh.gate.clear()
    refresher = CoalescingRefresher(refresh)
    refresher.request()
    await refresh.started.wait()
    refresher.request()  # pending: dropped by close
    closing = asyncio.create_task(refresher.close())
    await asyncio.sleep(0.01)
    assert not closing.done()  # waits for the database work in flight
    refresh.gate.set()
    await closing
    assert refresh.seen == [0]
    refresher.request()
    assert not refresher.busy


async def test_close_cancels_a_refresh_that_hangs_past_the_timeout() -> None:
    refresh = Refresh()
    refresh.gate.clear()
    refresher = CoalescingRefresher(refresh)
    refresher.request()
    await refresh.started.wait()
    await refresher.close(timeout_s=0.05)
    assert not refresher.busy
    assert refresh.seen == []

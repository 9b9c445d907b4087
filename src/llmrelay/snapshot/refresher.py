"""Turning a burst of "the config moved" signals into as few snapshot rebuilds as possible.

An admin editing ten routes in a row, or a signal arriving on two transports, must not start
ten concurrent builds: each reads every config table. `CoalescingRefresher.request()` is
cheap and never blocks; at most one refresh runs and at most one more is queued behind it.
A request that arrives while a refresh runs is not dropped (that refresh may have read the
generation just before the change), it is folded into the single pending one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)


class CoalescingRefresher:
    def __init__(self, refresh: Callable[[], Awaitable[object]]) -> None:
        self._refresh = refresh
        self._task: asyncio.Task[None] | None = None
        self._pending = False
        self._closed = False
        #: Refreshes actually run (requests folded into one count once).
        self.runs = 0

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def request(self) -> None:
        """Ask for a refresh soon; returns at once. Call from the event loop's thread."""
        if self._closed:
            return
        if self.busy:
            self._pending = True
            return
        self._task = asyncio.create_task(self._run())

    async def idle(self) -> None:
        """Wait until no refresh runs or is pending (tests, shutdown)."""
        while self.busy:
            assert self._task is not None
            await asyncio.wait((self._task,))

    async def close(self, timeout_s: float = 5.0) -> None:
        """Take no more requests; let a refresh in flight finish (its database work must end
        before the engine is disposed), cancelling it only past `timeout_s`."""
        self._closed = True
        self._pending = False
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        while True:
            self._pending = False
            self.runs += 1
            try:
                await self._refresh()
            except Exception as exc:  # noqa: BLE001 - the database may be briefly unreachable
                log.warning("snapshot_refresh_failed", error=f"{type(exc).__name__}: {exc}")
            if not self._pending or self._closed:
                return

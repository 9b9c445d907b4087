"""Write-behind: the request path hands an entry over and goes on; one task per process
writes the entries in order. A newer value for a key that is still waiting replaces it.
`flush` waits until what was handed over before it is written (a non-streamed Responses
answer waits for its home, so the client's next call reaches a replica that knows it)."""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from llmrelay.shared.store import Entries

log = structlog.get_logger("llmrelay.shared")

#: At most this many entries wait; beyond it the oldest is dropped (and logged): a store
#: that cannot keep up must not grow the process without bound.
MAX_PENDING = 100_000


class WriteBehind:
    def __init__(self, entries: Entries) -> None:
        self._entries = entries
        #: key -> (value, ttl), oldest first.
        self._pending: dict[str, tuple[str, float]] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._dropped = 0

    def put(self, key: str, value: str, ttl_s: float) -> None:
        pending = self._pending
        pending.pop(key, None)
        pending[key] = (value, ttl_s)
        if len(pending) > MAX_PENDING:
            del pending[next(iter(pending))]
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 10_000 == 0:
                log.warning("shared_state_writes_dropped", dropped=self._dropped)
        self._idle.clear()
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def flush(self) -> None:
        await self._idle.wait()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                key = next(iter(self._pending))
                value, ttl_s = self._pending.pop(key)
                try:
                    await self._entries.put(key, value, ttl_s)
                except Exception as exc:  # noqa: BLE001 - a lost binding is a cold cache, not an error
                    log.warning("shared_state_write_failed", error=f"{type(exc).__name__}: {exc}")
            self._idle.set()

    async def close(self) -> None:
        """Write what waits (bounded by the caller's timeout), then stop."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self.flush(), timeout=2.0)
        except TimeoutError:
            log.warning("shared_state_writes_left", left=len(self._pending))
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

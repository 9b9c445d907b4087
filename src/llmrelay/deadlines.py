"""Time limits on waits for a provider, checked by one sweep timer per process.

A per-request timer, or `asyncio.timeout` around every read, costs microseconds per use on
the request path; aiohttp's `sock_read` re-arms a timer on every packet. Here a wait costs a
dict insert and delete, a streamed chunk one clock read, and a wait that overstays its limit
has its task cancelled within `interval_s` of the limit. The timer runs only while waits are
open. Imports nothing of ours: providers and the gateway both use it.
"""

from __future__ import annotations

import asyncio


class Deadline:
    """One wait's limit; made by Deadlines.watch(), counting at once.

    A stream calls `pause` when a chunk has come and `resume` before it waits for the next,
    so only time spent waiting on the provider counts (not time spent writing to a slow
    client); `change` switches to another limit. After a CancelledError, `claim` says
    whether the limit caused it."""

    __slots__ = ("_owner", "expired", "last", "limit_s", "phase", "task", "waiting")

    def __init__(
        self, owner: Deadlines, task: asyncio.Task[object], limit_s: float, phase: str, now: float
    ) -> None:
        self._owner = owner
        self.task = task
        self.limit_s = limit_s
        self.phase = phase
        self.last = now
        self.expired = False
        self.waiting = True

    def pause(self) -> None:
        self.waiting = False

    def resume(self) -> None:
        self.last = self._owner.loop.time()
        self.waiting = True

    def change(self, limit_s: float, phase: str) -> None:
        """Switch to another limit (first token -> stream idle) for the next waits."""
        self.limit_s = limit_s
        self.phase = phase

    def stop(self) -> None:
        self._owner.forget(self)

    def claim(self) -> bool:
        """After a CancelledError: True, with the cancellation absorbed, if this caused it."""
        if self.expired:
            self.expired = False
            self.task.uncancel()
            return True
        return False


class Deadlines:
    """Every open wait's limit, checked by one sweep every `interval_s`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float = 0.1) -> None:
        self.loop = loop
        self._interval_s = interval_s
        self._active: dict[int, Deadline] = {}
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, limit_s: float, phase: str) -> Deadline:
        task = asyncio.current_task(self.loop)
        assert task is not None
        entry = Deadline(self, task, limit_s, phase, self.loop.time())
        self._active[id(entry)] = entry
        if self._timer is None:
            self._timer = self.loop.call_later(self._interval_s, self._sweep)
        return entry

    def forget(self, entry: Deadline) -> None:
        self._active.pop(id(entry), None)

    def _sweep(self) -> None:
        self._timer = None
        now = self.loop.time()
        for key, entry in list(self._active.items()):
            if entry.waiting and now - entry.last >= entry.limit_s:
                del self._active[key]
                entry.expired = True
                entry.task.cancel()
        if self._active:
            self._timer = self.loop.call_later(self._interval_s, self._sweep)

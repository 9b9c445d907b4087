"""Cheap watchers that cancel the request's task: one for a provider gone silent, one for a
client gone away.

Both avoid per-read `asyncio.timeout` contexts and eager helper tasks, which the request path
would pay for on every call: the silence watchdog is fed with one clock read per chunk and
checked by a single timer; the client watcher starts its listening task only once the call has
lasted `delay_s`, so quick calls never create it.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from starlette.types import Receive

from llmrelay.gateway.errors import ClientDisconnected

CLIENT_WATCH_DELAY_S = 0.05


class SilenceWatchdog:
    """Cancels the current task when `feed` was not called for `limit_s` seconds."""

    __slots__ = ("_due", "_handle", "_last", "_limit", "_loop", "_task", "expired", "phase")

    def __init__(self, loop: asyncio.AbstractEventLoop, limit_s: float, phase: str) -> None:
        # The loop is passed in: asyncio.get_running_loop() makes a getpid() system call.
        self._loop = loop
        task = asyncio.current_task(loop)
        assert task is not None
        self._task = task
        self._limit = limit_s
        self.phase = phase
        self.expired = False
        self._last = self._loop.time()
        self._due = self._last + limit_s
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(self._due, self._check)

    @property
    def limit_s(self) -> float:
        return self._limit

    def feed(self) -> None:
        self._last = self._loop.time()

    def change(self, limit_s: float, phase: str) -> None:
        """Switch to another limit (for example first token -> stream idle), counting from now."""
        self._limit = limit_s
        self.phase = phase
        self.feed()
        due = self._last + limit_s
        if self._handle is not None and due < self._due:
            self._handle.cancel()
            self._due = due
            self._handle = self._loop.call_at(due, self._check)

    def _check(self) -> None:
        due = self._last + self._limit
        if self._loop.time() >= due:
            self._handle = None
            self.expired = True
            self._task.cancel()
        else:
            self._due = due
            self._handle = self._loop.call_at(due, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def claim(self) -> bool:
        """After a CancelledError: True, with the cancellation absorbed, if this caused it."""
        if self.expired:
            self.expired = False
            self._task.uncancel()
            return True
        return False


class ClientWatch:
    """One request's watch for its client leaving; made by ClientWatches.watch().

    Use as `with watches.watch(receive):` around waits on the provider: when the client
    disconnects, the request's task is cancelled and the block raises ClientDisconnected.
    """

    __slots__ = ("_owner", "_receive", "_task", "_watcher", "gone", "seen")

    def __init__(self, owner: ClientWatches, receive: Receive, task: asyncio.Task[object]) -> None:
        self._owner = owner
        self._receive = receive
        self._task = task
        self._watcher: asyncio.Task[None] | None = None
        self.gone = False
        self.seen = False

    def listen(self, loop: asyncio.AbstractEventLoop) -> None:
        self._watcher = loop.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.gone = True
                self._task.cancel()
                return

    def __enter__(self) -> ClientWatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._owner.forget(self)
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        if self.gone and exc_type is asyncio.CancelledError:
            self._task.uncancel()
            raise ClientDisconnected


class ClientWatches:
    """Starts listening for disconnects only for requests that last, with one timer per
    process instead of one per request.

    Every `interval_s` a sweep gives a listening task to each watch that was already there at
    the previous sweep, so a request that waits on its provider is listened for after one to
    two intervals, and a quick request costs a dict insert and delete. The timer runs only
    while watches exist.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, interval_s: float = CLIENT_WATCH_DELAY_S
    ) -> None:
        self._loop = loop
        self._interval_s = interval_s
        self._waiting: dict[int, ClientWatch] = {}
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, receive: Receive) -> ClientWatch:
        task = asyncio.current_task(self._loop)
        assert task is not None
        entry = ClientWatch(self, receive, task)
        self._waiting[id(entry)] = entry
        if self._timer is None:
            self._timer = self._loop.call_later(self._interval_s, self._sweep)
        return entry

    def forget(self, entry: ClientWatch) -> None:
        self._waiting.pop(id(entry), None)

    def _sweep(self) -> None:
        self._timer = None
        for key, entry in list(self._waiting.items()):
            if entry.seen:
                del self._waiting[key]
                entry.listen(self._loop)
            else:
                entry.seen = True
        if self._waiting:
            self._timer = self._loop.call_later(self._interval_s, self._sweep)

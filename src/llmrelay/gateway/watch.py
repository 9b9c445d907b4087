"""Noticing a client that went away while its request waits on the provider.

No eager helper task per request: one process-wide sweep timer over a dict of open requests
starts a listening task only for a call that has lasted a sweep or two, so quick calls never
make one. (Silence limits on the provider side are llmrelay.deadlines, the same idea.)
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Final

from starlette.types import Receive

from llmrelay.gateway.errors import ClientDisconnected

CLIENT_WATCH_DELAY_S: Final = 0.05


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

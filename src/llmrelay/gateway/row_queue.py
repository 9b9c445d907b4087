"""The recorder's queue: a bounded FIFO of record rows with one consumer.

Every data-plane request puts one row here, so the put is the only part on the request
path. asyncio.Queue costs about 4,000 CPU instructions per row between its put_nowait,
get_nowait and task_done (each a few Python calls, an Event and waiter bookkeeping; measured
with callgrind); here a put is a length check and a deque append, and the consumer takes a
whole batch at once. The consumer wakes on the first row put while it waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

Row = tuple[Any, ...]


class RowQueue:
    __slots__ = ("_maxsize", "_rows", "_waiter")

    def __init__(self, maxsize: int) -> None:
        self._rows: deque[Row] = deque()
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def put(self, row: Row) -> bool:
        """Queue `row`; False when the queue is full (the row is not queued)."""
        rows = self._rows
        if len(rows) >= self._maxsize:
            return False
        rows.append(row)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        return True

    async def wait(self) -> None:
        """Return once the queue holds a row (at once if it does)."""
        while not self._rows:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None

    def take(self, limit: int) -> list[Row]:
        """Up to `limit` rows, oldest first, removed from the queue."""
        rows = self._rows
        if len(rows) <= limit:
            taken = list(rows)
            rows.clear()
            return taken
        popleft = rows.popleft
        return [popleft() for _ in range(limit)]

    def put_back(self, rows: list[Row]) -> None:
        """Return rows a consumer took but could not handle, to the front, in their order
        (past the size bound: they were admitted already)."""
        self._rows.extendleft(reversed(rows))

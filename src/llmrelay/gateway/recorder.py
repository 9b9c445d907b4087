"""Request records, written off the request path.

Handlers put a finished record on a bounded queue (never awaiting the database); one
background task writes them in batches. Inserts are idempotent by request id, so a batch
retried after a failure cannot duplicate rows. On shutdown the queue is drained.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.models import RequestRecord

log = structlog.get_logger(__name__)

_TABLE = RequestRecord.__table__
_RETRY_DELAYS_S = (0.1, 0.5, 1.0, 2.0, 5.0)


class Recorder:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_queue: int = 50_000,
        batch_size: int = 500,
    ) -> None:
        self._engine = engine
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(max_queue)
        self._batch_size = batch_size
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        self._insert = dialect.insert(_TABLE).on_conflict_do_nothing(index_elements=["request_id"])
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0

    def record(self, row: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(row)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error("record_queue_full", dropped=self.dropped)

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="llmrelay-recorder")

    async def stop(self, timeout_s: float) -> None:
        """Write what is queued (within `timeout_s`), then stop the writer."""
        if self._task is None:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self._queue.join()
        except TimeoutError:
            log.error("record_drain_timeout", remaining=self._queue.qsize())
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write(self, batch: list[dict[str, Any]]) -> None:
        for attempt, delay in enumerate((*_RETRY_DELAYS_S, None)):
            try:
                async with self._engine.begin() as conn:
                    await conn.execute(self._insert, batch)
                self.written += len(batch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the writer must outlive database trouble
                if delay is None:
                    self.dropped += len(batch)
                    log.error("record_batch_lost", rows=len(batch), error=str(exc))
                    return
                log.warning("record_batch_retry", attempt=attempt + 1, error=str(exc))
                await asyncio.sleep(delay)

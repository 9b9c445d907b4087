"""Request records, written off the request path.

Handlers put a finished record (a tuple) on a bounded queue, never awaiting the database;
one background task writes them in batches gathered over `gather_s`. The insert is compiled
once and sent as driver-level SQL (no per-row ORM or Core processing: about half the CPU per
row), idempotent by request id, so a batch retried after a failure cannot duplicate rows.
On shutdown the queue is drained. How a batch reaches each database: record_writers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import ATTEMPT_COLUMNS, RECORD_COLUMNS
from llmrelay.gateway.record_writers import BatchWriter, InsertSql, writer_for
from llmrelay.store.models import RequestAttempt, RequestRecord

log = structlog.get_logger(__name__)

_RETRY_DELAYS_S = (0.1, 0.5, 1.0, 2.0, 5.0)


class Recorder:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_queue: int = 50_000,
        batch_size: int = 4096,
        gather_s: float = 0.2,
    ) -> None:
        self._queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue(max_queue)
        self._batch_size = batch_size
        self._gather_s = gather_s
        self._stopping = False
        self._records = InsertSql(engine, RequestRecord.__table__, RECORD_COLUMNS, ["request_id"])
        self._attempt_rows = InsertSql(
            engine, RequestAttempt.__table__, ATTEMPT_COLUMNS, ["request_id", "attempt"]
        )
        self._writer: BatchWriter = writer_for(engine)
        #: Attempt rows of queued records, written with the next batch (rare: only requests
        #: that needed more than one attempt or failed upstream have any).
        self._attempts: list[tuple[Any, ...]] = []
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0

    def record(self, row: tuple[Any, ...], attempts: list[tuple[Any, ...]] | None = None) -> None:
        try:
            self._queue.put_nowait(row)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error("record_queue_full", dropped=self.dropped)
            return
        if attempts:
            self._attempts.extend(attempts)

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="llmrelay-recorder")

    async def stop(self, timeout_s: float) -> None:
        """Write what is queued (within `timeout_s`), then stop the writer."""
        if self._task is None:
            return
        self._stopping = True
        try:
            async with asyncio.timeout(timeout_s):
                await self._queue.join()
        except TimeoutError:
            log.error("record_drain_timeout", remaining=self._queue.qsize())
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        await self._writer.drain()
        self._writer.close()

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            if not self._stopping and self._queue.qsize() < self._batch_size:
                # Let a batch gather: one transaction per few hundred rows, not per row,
                # is what keeps the writer's CPU per request small under load.
                await asyncio.sleep(self._gather_s)
            while len(batch) < self._batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            attempts, self._attempts = self._attempts, []
            try:
                await self._write(batch, attempts)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write(self, batch: list[tuple[Any, ...]], attempts: list[tuple[Any, ...]]) -> None:
        rows = self._records.prepare(batch)
        statements = self._records.statements(rows)
        if attempts:
            statements += self._attempt_rows.statements(self._attempt_rows.prepare(attempts))
        for attempt, delay in enumerate((*_RETRY_DELAYS_S, None)):
            try:
                await self._writer.write(statements, len(rows) + len(attempts))
                self.written += len(rows)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the writer must outlive database trouble
                if delay is None:
                    self.dropped += len(rows)
                    log.error("record_batch_lost", rows=len(rows), error=str(exc))
                    return
                log.warning("record_batch_retry", attempt=attempt + 1, error=str(exc))
                await asyncio.sleep(delay)

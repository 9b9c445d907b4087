"""Request records, written off the request path.

Handlers put a finished record (a tuple) on a bounded queue, never awaiting the database;
one background task writes them in batches gathered over `gather_s`. The insert is compiled
once and sent as driver-level SQL (no per-row ORM or Core processing: about half the CPU per
row), idempotent by request id, so a batch retried after a failure cannot duplicate rows.
On shutdown the queue is drained.

On SQLite each batch goes as a few multi-row INSERT statements rather than an executemany:
aiosqlite runs the driver on its own thread, and an executemany hands the GIL back and forth
with the event loop for every row — measured, that convoy cost more than the inserts
themselves. PostgreSQL (asyncpg) runs on the event loop and pipelines an executemany.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import structlog
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import ATTEMPT_COLUMNS, RECORD_COLUMNS
from llmrelay.store.models import RequestAttempt, RequestRecord

log = structlog.get_logger(__name__)

_RETRY_DELAYS_S = (0.1, 0.5, 1.0, 2.0, 5.0)
#: Rows per SQLite statement, largest first: a batch is cut greedily into these sizes, so
#: only this many distinct statements exist. (Every distinct SQL text is a prepared statement
#: in sqlite3's cache, and one with thousands of parameters is big: one text per batch size
#: once cost about 100 MB of memory.) Few, large statements matter under load: each one is a
#: round trip to aiosqlite's thread, resumed only when the event loop comes round to the
#: writer, and with 256 busy connections a loop turn takes tens of milliseconds; with 256-row
#: statements the writer fell behind a saturated gateway and its queue overflowed.
_SQLITE_STATEMENT_ROWS = (1024, 256, 64, 16, 4, 1)


class _SqliteTime:
    """SQLAlchemy's own SQLite storage format for DateTime, so the ORM reads it back. The
    date-and-time part is formatted once per second (a batch shares a handful of seconds)."""

    __slots__ = ("_second", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def __call__(self, timestamp: float) -> str:
        seconds = int(timestamp)
        micros = round((timestamp - seconds) * 1_000_000)
        if micros == 1_000_000:
            seconds, micros = seconds + 1, 0
        if seconds != self._second:
            self._second = seconds
            self._text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
        return f"{self._text}.{micros:06d}"


def _aware_time(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


class _Insert:
    """One table's idempotent INSERT, compiled once, and its multi-row forms for SQLite."""

    def __init__(
        self, engine: AsyncEngine, table: Any, columns: tuple[str, ...], unique: list[str]
    ) -> None:
        is_postgres = engine.dialect.name == "postgresql"
        dialect = postgresql if is_postgres else sqlite
        statement = dialect.insert(table).on_conflict_do_nothing(index_elements=unique)
        compiled = statement.compile(dialect=engine.dialect, column_keys=list(columns))
        assert tuple(compiled.positiontup or ()) == columns, compiled.positiontup
        self.sql = str(compiled)
        self.multi_row = not is_postgres
        self.created_at = columns.index("created_at")
        head, _, rest = self.sql.partition(" VALUES ")
        group, _, tail = rest.partition(")")
        self._parts = (head + " VALUES ", group + ")", tail)
        self._multi_sql: dict[int, str] = {}

    def statements(self, rows: list[tuple[Any, ...]]) -> list[tuple[str, Any]]:
        """SQLite: multi-row INSERTs covering `rows`, sized from _SQLITE_STATEMENT_ROWS.
        PostgreSQL: one executemany."""
        if not self.multi_row:
            return [(self.sql, rows)] if rows else []
        out: list[tuple[str, Any]] = []
        start = 0
        for size in _SQLITE_STATEMENT_ROWS:
            while len(rows) - start >= size:
                part = rows[start : start + size]
                out.append((self._statement_for(size), tuple(chain.from_iterable(part))))
                start += size
        return out

    def _statement_for(self, count: int) -> str:
        sql = self._multi_sql.get(count)
        if sql is None:
            head, group, tail = self._parts
            sql = self._multi_sql[count] = head + ", ".join([group] * count) + tail
        return sql


class Recorder:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_queue: int = 50_000,
        batch_size: int = 4096,
        gather_s: float = 0.2,
    ) -> None:
        self._engine = engine
        self._queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue(max_queue)
        self._batch_size = batch_size
        self._gather_s = gather_s
        self._stopping = False
        self._records = _Insert(engine, RequestRecord.__table__, RECORD_COLUMNS, ["request_id"])
        self._attempt_rows = _Insert(
            engine, RequestAttempt.__table__, ATTEMPT_COLUMNS, ["request_id", "attempt"]
        )
        #: Attempt rows of queued records, written with the next batch (rare: only requests
        #: that needed more than one attempt or failed upstream have any).
        self._attempts: list[tuple[Any, ...]] = []
        is_postgres = engine.dialect.name == "postgresql"
        self._time: Callable[[float], Any] = _aware_time if is_postgres else _SqliteTime()
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

    def _prepare(self, batch: list[tuple[Any, ...]], at: int) -> list[tuple[Any, ...]]:
        convert = self._time
        return [(*row[:at], convert(row[at]), *row[at + 1 :]) for row in batch]

    async def _write(self, batch: list[tuple[Any, ...]], attempts: list[tuple[Any, ...]]) -> None:
        rows = self._prepare(batch, self._records.created_at)
        statements = self._records.statements(rows)
        if attempts:
            prepared = self._prepare(attempts, self._attempt_rows.created_at)
            statements += self._attempt_rows.statements(prepared)
        for attempt, delay in enumerate((*_RETRY_DELAYS_S, None)):
            try:
                async with self._engine.begin() as conn:
                    for sql, params in statements:
                        await conn.exec_driver_sql(sql, params)
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

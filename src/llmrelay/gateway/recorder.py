"""Request records, written off the request path.

Handlers put a finished record (a tuple) on a bounded queue, never awaiting the database;
one background task writes them in batches gathered over `gather_s`. The insert is compiled
once and sent as driver-level SQL (no per-row ORM or Core processing: about half the CPU per
row), idempotent by request id, so a batch retried after a failure cannot duplicate rows.
How a batch reaches each database: record_writers.py.

When the database cannot take a batch (after one quick retry), the batch goes to the local
spool (spool.py) instead of being dropped, and the same task replays the spool about once a
second until it is empty; new batches still try the database first (replay order does not
matter: the inserts are idempotent). Replay shares this task with the batches, so the SQLite
writer's one connection never runs two transactions at once. On shutdown the queue is
drained to the database or, while it is down, to the spool, which the next start replays.

When the spool cannot be written either (its disk is full or failing) while the database
is away, a batch is held in memory, up to `max_queue` rows in all, and offered to the
database, then to the spool, at every replay; past that bound a batch is dropped, counted
and logged (`record_batch_lost`), as are batches still held when the process stops.

Payload rows (the bodies of requests whose key captures them, gateway/capture.py) ride
along with their records like attempt rows, through the spool too, into `request_payloads`;
so do guardrail hit rows (gateway/guard.py), into `guardrail_hits`.
The bodies they hold wait in memory only up to MAX_QUEUED_PAYLOAD_BYTES; past that a payload
is dropped (its record is not) and counted, so a burst of large captured bodies cannot take
the process's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import ATTEMPT_COLUMNS, HIT_COLUMNS, RECORD_COLUMNS
from llmrelay.gateway.capture import PAYLOAD_COLUMNS
from llmrelay.gateway.record_writers import (
    PG_CHUNK_ROWS,
    SLICE_S,
    SQLITE_STATEMENT_ROWS,
    BatchWriter,
    InsertSql,
    SqliteWriter,
    Statement,
    writer_for,
)
from llmrelay.gateway.row_queue import RowQueue
from llmrelay.gateway.spool import Row, Spool
from llmrelay.observability.metrics import Metrics
from llmrelay.store import rollups
from llmrelay.store.key_use import KeyUse
from llmrelay.store.models import RequestAttempt, RequestPayload, RequestRecord
from llmrelay.store.models_guardrails import GuardrailHit

log = structlog.get_logger(__name__)

_CREATED_AT: Final = RECORD_COLUMNS.index("created_at")
_REQUEST_BODY: Final = PAYLOAD_COLUMNS.index("request_body")
_RESPONSE_BODY: Final = PAYLOAD_COLUMNS.index("response_body")
#: The most captured body bytes held in memory on their way to the database.
MAX_QUEUED_PAYLOAD_BYTES = 64 * 1024 * 1024

#: Pauses before retrying a failed batch: one quick retry rides out a dropped connection;
#: past that the batch goes to the spool rather than holding up the batches behind it.
_RETRY_DELAYS_S: Final[tuple[float, ...]] = (0.5,)
#: A batch: record rows, attempt rows, payload rows, hit rows.
Batch = tuple[list[Row], list[Row], list[Row], list[Row]]
#: Rows of a batch taken at a time while its statements are made: one statement's (the largest
#: SQLite one, or a PostgreSQL executemany), so only the batch's last piece has a remainder in
#: smaller statements, and noting a piece's keys and hours adds to one step, not to every
#: eighth (pieces of 256 rows: the slices' p99 at c=8 1.17 ms against 0.82, sources,
#: bench.stalls; docs/performance.md, "On a quiet machine").
_PIECE_ROWS: Final = {True: SQLITE_STATEMENT_ROWS[0], False: PG_CHUNK_ROWS}
#: Rows still queued behind the batch being written from which the recorder is behind (a
#: saturated loop's queue then stays near this: each queued row is memory, about 1.5 KB).
_BEHIND_ROWS: Final = 1024
#: How often the spool is replayed while it holds anything.
_REPLAY_EVERY_S: Final = 1.0
#: The longest one write to a network database may take before it counts as failed: a lost
#: network can leave a connect or a query hanging for minutes. (SQLite bounds its own wait
#: for a lock, `record_writers.LOCKED_WAIT_S`.)
_WRITE_TIMEOUT_S: Final = 10.0


class Recorder:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_queue: int = 50_000,
        batch_size: int = 4096,
        gather_s: float = 0.2,
        spool_dir: Path | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._queue = RowQueue(max_queue)
        #: A batch is being written (stop() waits for it and the queue).
        self._writing = False
        self._batch_size = batch_size
        self._gather_s = gather_s
        self._stopping = False
        self._records = InsertSql(engine, RequestRecord.__table__, RECORD_COLUMNS, ["request_id"])
        self._attempt_rows = InsertSql(
            engine, RequestAttempt.__table__, ATTEMPT_COLUMNS, ["request_id", "attempt"]
        )
        self._payload_rows = InsertSql(
            engine, RequestPayload.__table__, PAYLOAD_COLUMNS, ["request_id"]
        )
        self._hit_rows = InsertSql(
            engine, GuardrailHit.__table__, HIT_COLUMNS, ["request_id", "seq"]
        )
        self._writer: BatchWriter = writer_for(engine)
        self._mark_sql = rollups.mark_sql(engine)
        #: API keys' last_used_at, from each batch written (store/key_use.py).
        self._key_use = KeyUse(
            engine,
            key_at=RECORD_COLUMNS.index("key_id"),
            time_at=_CREATED_AT,
            convert_time=self._records.convert_time,
        )
        self._write_timeout_s = None if isinstance(self._writer, SqliteWriter) else _WRITE_TIMEOUT_S
        #: Attempt rows of queued records, written with the next batch (rare: only requests
        #: that needed more than one attempt or failed upstream have any).
        self._attempts: list[Row] = []
        #: Payload rows of queued records (only keys that capture have any), and the body
        #: bytes they hold.
        self._payloads: list[Row] = []
        self._payload_bytes = 0
        #: Guardrail hit rows of queued records (only requests a rule matched have any).
        self._hits: list[Row] = []
        #: The batch being written, kept for the spool if shutdown cancels its write.
        self._inflight: Batch | None = None
        self._task: asyncio.Task[None] | None = None
        self.spool = Spool(spool_dir) if spool_dir is not None else None
        #: True while the spool may hold files to replay (at start: a last run's).
        self._replay_pending = self.spool is not None
        self._replay_at = 0.0
        self._replay_failures = 0
        self._metrics = metrics
        if metrics is not None and self.spool is not None:
            spool = self.spool
            metrics.watch(metrics.record_spool_rows, lambda: spool.pending_rows)
            metrics.watch(metrics.record_spool_bytes, lambda: spool.size_bytes)
        #: Batches neither the database nor the spool took (a full disk during an outage),
        #: oldest first, and their record rows: at most `max_queue` of them.
        self._held: list[Batch] = []
        self._held_rows = 0
        self._max_held = max_queue
        self._spool_failures = 0
        if metrics is not None:
            metrics.watch(metrics.records_held, lambda: self._held_rows)
        #: Rows queued, and how many of them (oldest first) the database or the spool holds
        #: (the journal's marks, gateway/journal.py).
        self.queued_total = 0
        self.durable_total = 0
        self._taken_total = 0
        self.written = 0
        self.spooled = 0
        self.dropped = 0
        self.payloads_dropped = 0

    def record(
        self,
        row: Row,
        attempts: list[Row] | None = None,
        payload: Row | None = None,
        hits: list[Row] | None = None,
    ) -> None:
        if not self._queue.put(row):
            self._count_dropped(1)
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error("record_queue_full", dropped=self.dropped)
            return
        self.queued_total += 1
        if attempts:
            self._attempts.extend(attempts)
        if payload is not None:
            self._keep_payload(payload)
        if hits:
            self._hits.extend(hits)

    def _keep_payload(self, payload: Row) -> None:
        size = len(payload[_REQUEST_BODY] or b"") + len(payload[_RESPONSE_BODY] or b"")
        if self._payload_bytes + size > MAX_QUEUED_PAYLOAD_BYTES:
            self.payloads_dropped += 1
            if self.payloads_dropped == 1 or self.payloads_dropped % 100 == 0:
                log.error("payload_queue_full", dropped=self.payloads_dropped)
            return
        self._payloads.append(payload)
        self._payload_bytes += size

    @property
    def depth(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="llmrelay-recorder")

    async def stop(self, timeout_s: float) -> None:
        """Write what is queued (within `timeout_s`), then stop the writer. What the database
        did not take by then goes to the spool, for the next start to replay."""
        if self._task is None:
            return
        self._stopping = True
        try:
            async with asyncio.timeout(timeout_s):
                # Polled, once at shutdown: an Event would cost every record() a clear().
                while len(self._queue) or self._writing:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        except TimeoutError:
            log.error("record_drain_timeout", remaining=len(self._queue))
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        if self._held:  # one more offer to the database, then to the spool
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._release_held()
        self._keep_leftovers()
        await self._writer.drain()
        self._writer.close()
        if self.spool is not None:
            self.spool.close()

    async def _run(self) -> None:
        while True:
            await self._replay_when_due()
            if not await self._rows_ready():
                continue
            self._writing = True
            try:
                if not self._stopping and len(self._queue) < self._batch_size:
                    # Let a batch gather: one transaction per few hundred rows, not per
                    # row, is what keeps the writer's CPU per request small under load.
                    await asyncio.sleep(self._gather_s)
                batch = self._queue.take(self._batch_size)
                self._taken_total += len(batch)
                attempts, self._attempts = self._attempts, []
                payloads, self._payloads, self._payload_bytes = self._payloads, [], 0
                hits, self._hits = self._hits, []
                self._inflight = (batch, attempts, payloads, hits)
                await self._write(batch, attempts, payloads, hits)
                self._inflight = None  # not reached when stop() cancels the write
                if not self._held:  # a held batch is only in memory: not durable yet
                    self.durable_total = self._taken_total
            finally:
                self._writing = False

    async def _rows_ready(self) -> bool:
        """Wait for a queued row: True once there is one, False when the spool is due for
        a replay first."""
        if not self._replay_pending or self._stopping or len(self._queue):
            await self._queue.wait()
            return True
        wait = self._replay_at - time.monotonic()
        if wait <= 0:
            return False
        try:
            await asyncio.wait_for(self._queue.wait(), wait)
        except TimeoutError:
            return False
        return True

    async def _write(
        self, batch: list[Row], attempts: list[Row], payloads: list[Row], hits: list[Row]
    ) -> None:
        """To the database, retried once; else to the spool; dropped only if that fails."""
        for attempt, delay in enumerate((*_RETRY_DELAYS_S, None)):
            try:
                await self._insert(batch, attempts, payloads, hits)
                self.written += len(batch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the writer must outlive database trouble
                if delay is None:
                    await self._to_spool(batch, attempts, payloads, hits, exc)
                    return
                log.warning("record_batch_retry", attempt=attempt + 1, error=str(exc))
                await asyncio.sleep(delay)

    async def _insert(
        self,
        batch: list[Row],
        attempts: list[Row],
        payloads: Sequence[Row] = (),
        hits: Sequence[Row] = (),
    ) -> None:
        """One transaction for the records, attempt rows, payload rows and hit rows; raises
        when it failed. The statements are made as the writer takes them (`_statements`)."""
        rows = len(batch) + len(attempts) + len(payloads) + len(hits)
        statements = self._statements(batch, attempts, payloads, hits)
        async with asyncio.timeout(self._write_timeout_s):
            await self._writer.write(statements, rows, SLICE_S, self.behind)
        await self._touch_keys()

    def behind(self) -> bool:
        """Whether the writer is behind: its slices are longer until it has caught up
        (record_writers.SLICE_BEHIND_S)."""
        return len(self._queue) >= _BEHIND_ROWS

    def _statements(
        self,
        batch: list[Row],
        attempts: list[Row],
        payloads: Sequence[Row],
        hits: Sequence[Row],
    ) -> Iterator[Statement]:
        """The batch's statements, each made only when the writer asks for the next, so a
        batch of thousands of rows never holds the event loop for more than a slice. The
        keys' last use and the hours to roll up are noted piece by piece on the way."""
        hours: set[int] = set()
        size = _PIECE_ROWS[self._records.multi_row]
        for start in range(0, len(batch), size):
            piece = batch[start : start + size]
            self._key_use.note(piece)
            for row in piece:
                hours.add(int(row[_CREATED_AT] // 3600))
            yield from self._records.chunks(piece)
        if attempts:
            yield from self._attempt_rows.chunks(attempts)
        if payloads:
            yield from self._payload_statements(payloads)
        if hits:
            yield from self._hit_rows.chunks(list(hits))
        # The hours these records fall in need their rollups recomputed (store/rollups.py):
        # marked in the same transaction, so a recompute can never miss a committed record.
        convert = self._records.convert_time
        for hour in sorted(hours):
            yield (self._mark_sql, (convert(hour * 3600.0), 1, 1))

    async def _touch_keys(self) -> None:
        """After the batch's commit, its keys' last_used_at; best effort (a failure keeps
        the times for the next batch and never sends the records to the spool)."""
        statements = self._key_use.statements()  # noted while the batch was written
        if not statements:
            return
        try:
            async with asyncio.timeout(self._write_timeout_s):
                await self._writer.write(statements, 0)
        except Exception as exc:  # noqa: BLE001 - the records are in; the times wait
            log.warning("key_use_write_failed", keys=len(self._key_use.pending), error=str(exc))
            return
        self._key_use.written()

    def _payload_statements(self, payloads: Sequence[Row]) -> Iterator[Statement]:
        """SQLite: one statement per payload row, so the writer can let requests through
        between two bodies of up to a few MiB each; PostgreSQL: executemanys."""
        insert = self._payload_rows
        if not insert.multi_row:
            yield from insert.chunks(list(payloads))
            return
        for row in payloads:
            yield from insert.chunks([row])

    async def _to_spool(
        self,
        batch: list[Row],
        attempts: list[Row],
        payloads: list[Row],
        hits: list[Row],
        error: Exception,
    ) -> None:
        failure: Exception | None = None
        if self.spool is not None:
            try:
                # In a thread: the fsync may take a while, and requests go on meanwhile.
                await asyncio.to_thread(self.spool.append, batch, attempts, payloads, hits)
            except Exception as exc:  # noqa: BLE001 - a full or failing disk: held, or lost
                failure = exc
            if failure is not None and self._held_rows + len(batch) <= self._max_held:
                self._hold((batch, attempts, payloads, hits), failure)
                return
        self._account(len(batch), failure or error, lost=self.spool is None or failure is not None)

    def _hold(self, batch: Batch, failure: Exception) -> None:
        self._held.append(batch)
        self._held_rows += len(batch[0])
        self._spool_failures += 1
        self._replay_pending = True
        self._replay_at = max(self._replay_at, time.monotonic() + _REPLAY_EVERY_S)
        if self._metrics is not None:
            self._metrics.record_spool_write_failures.inc()
        if self._spool_failures % 100 == 1:  # the first, then every hundredth while it lasts
            log.error(
                "record_spool_write_failed",
                error=str(failure),
                held_rows=self._held_rows,
                failures=self._spool_failures,
            )

    async def _release_held(self) -> bool:
        """Offer the held batches, oldest first, to the database, else to the spool; True
        once none is left, False at the first that neither took."""
        spool = self.spool
        assert spool is not None
        while self._held:
            batch = self._held[0]
            try:
                await self._insert(*batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database is still away
                try:
                    await asyncio.to_thread(spool.append, *batch)
                except Exception:  # noqa: BLE001 - the disk is still full: held a while more
                    return False
                self._account(len(batch[0]), exc, lost=False)
            else:
                self.written += len(batch[0])
            self._held.pop(0)
            self._held_rows -= len(batch[0])
        log.info("record_held_batches_released", spool_failures=self._spool_failures)
        return True

    async def _replay_when_due(self) -> None:
        """Replay one spool file, so queued batches wait for one file's replay at most; the
        next file is due at once after a success, a second later after a failure (or after
        a batch went to the spool: the database is away, and trying costs a batch's wait)."""
        spool = self.spool
        if spool is None or not self._replay_pending or self._stopping:
            return
        if time.monotonic() < self._replay_at:
            return
        if self._held and not await self._release_held():
            self._replay_at = time.monotonic() + _REPLAY_EVERY_S
            return
        try:
            done = await spool.replay(self._insert, max_files=1)
        except Exception as exc:  # noqa: BLE001 - the database is still away: try again later
            self._replay_at = time.monotonic() + _REPLAY_EVERY_S
            self._replay_failures += 1
            if self._replay_failures % 60 == 1:  # about once a minute while it lasts
                log.warning("record_replay_failed", failures=self._replay_failures, error=str(exc))
            return
        self._replay_failures = 0
        self._replay_pending = not done

    def _keep_leftovers(self) -> None:
        """After the writer stopped: what is still queued (and the batch whose write was
        cancelled) to the spool, on the event loop (the process is about to exit)."""
        batch, attempts, payloads, hits = self._inflight or ([], [], [], [])
        self._inflight = None
        for held in self._held:
            batch += held[0]
            attempts += held[1]
            payloads += held[2]
            hits += held[3]
        self._held, self._held_rows = [], 0
        leftovers = self._queue.take(len(self._queue))
        self._taken_total += len(leftovers)
        batch.extend(leftovers)
        attempts, self._attempts = attempts + self._attempts, []
        payloads, self._payloads, self._payload_bytes = payloads + self._payloads, [], 0
        hits, self._hits = hits + self._hits, []
        if not batch and not attempts and not payloads and not hits:
            self.durable_total = self._taken_total
            return
        failure: Exception | None = None
        if self.spool is not None:
            try:
                self.spool.append(batch, attempts, payloads, hits)
            except Exception as exc:  # noqa: BLE001 - a full or failing disk: counted as lost
                failure = exc
        error = failure or "shut down before the database took them"
        self._account(len(batch), error, lost=self.spool is None or failure is not None)
        if self.spool is not None and failure is None:
            self.durable_total = self._taken_total

    def _account(self, rows: int, error: Exception | str, *, lost: bool) -> None:
        if lost:
            self._count_dropped(rows)
            log.error("record_batch_lost", rows=rows, error=str(error))
            return
        self.spooled += rows
        self._replay_pending = True
        self._replay_at = max(self._replay_at, time.monotonic() + _REPLAY_EVERY_S)
        if self._metrics is not None:
            self._metrics.records_spooled.inc(rows)
        log.warning("record_batch_spooled", rows=rows, error=str(error))

    def _count_dropped(self, rows: int) -> None:
        self.dropped += rows
        if self._metrics is not None:
            self._metrics.records_dropped.inc(rows)

"""The batched record writer, against real SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.testing import capture_logs

from llmrelay.gateway import record_writers
from llmrelay.gateway.call import RECORD_COLUMNS, CallRecord
from llmrelay.gateway.record_writers import (
    SLICE_BEHIND_S,
    SLICE_S,
    SQLITE_STATEMENT_ROWS,
    SqliteWriter,
    Statement,
)
from llmrelay.gateway.recorder import Recorder
from llmrelay.observability.metrics import Metrics
from llmrelay.store.db import create_engine, session_factory
from llmrelay.store.models import RequestAttempt, RequestPayload, RequestRecord
from tests.gateway.test_capture import captured_record, payload_row
from tests.support.migrated import migrated_sqlite_url


def _record(request_id: str) -> CallRecord:
    record = CallRecord(request_id, "chat.completions", time.perf_counter())
    record.virtual_model = "m"
    record.take_usage({"prompt_tokens": 3, "completion_tokens": 4})
    record.policy_id = "policy-1" if request_id == "req-3" else None
    return record


async def test_rows_are_written_once_each_and_read_back_by_the_orm(engine: AsyncEngine) -> None:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    records = [_record(f"req-{i}") for i in range(700)]  # crosses several statement sizes
    for record in records:
        recorder.record(record.row(12.5))
    retried = _record("req-3")  # a retried record: kept once, first write wins
    retried.created = records[3].created  # a retry carries the record's own time
    recorder.record(retried.row(99.0))
    await recorder.stop(timeout_s=10)
    async with session_factory(engine)() as session:
        rows = (await session.scalars(select(RequestRecord))).all()
    assert len(rows) == 700
    assert {r.request_id for r in rows} == {f"req-{i}" for i in range(700)}
    row = next(r for r in rows if r.request_id == "req-3")
    assert (row.latency_ms, row.prompt_tokens, row.completion_tokens) == (12.5, 3, 4)
    assert row.policy_id == "policy-1"
    assert {r.policy_id for r in rows if r.request_id != "req-3"} == {None}
    assert abs(row.created_at.timestamp() - time.time()) < 60
    assert row.created_at.tzinfo is not None
    assert recorder.written == 701 and recorder.dropped == 0


async def test_batches_use_a_handful_of_statement_shapes(engine: AsyncEngine) -> None:
    recorder = Recorder(engine)
    insert = recorder._records
    for count in range(1, 600):
        rows = [_record(f"r{i}").row(1.0) for i in range(count)]
        statements = insert.statements(insert.prepare(rows))
        if insert.multi_row:  # SQLite: flat parameters of multi-row statements
            assert sum(len(params) for _, params in statements) == count * len(RECORD_COLUMNS)
        else:  # PostgreSQL: one executemany
            assert len(statements) == 1 and len(statements[0][1]) == count
    assert insert.statement_shapes <= len(SQLITE_STATEMENT_ROWS)


async def test_attempts_are_written_with_their_record_once_each(engine: AsyncEngine) -> None:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    record = _record("req-attempts")
    for kind, status, outcome in (
        ("first", 503, "upstream_error"),
        ("retry", None, "upstream_unreachable"),
        ("fallback", 200, "ok"),
    ):
        record.attempts += 1
        record.route_id = f"route-{kind}"
        record.provider = f"p-{kind}"
        record.log_attempt(kind, status, outcome, 1.5)
    recorder.record(record.row(9.0), record.attempt_log)
    recorder.record(record.row(9.0), record.attempt_log)  # written again: no duplicates
    await recorder.stop(timeout_s=10)
    async with session_factory(engine)() as session:
        rows = (await session.scalars(select(RequestRecord))).all()
        attempts = (await session.scalars(select(RequestAttempt))).all()
    assert [(r.attempts, r.route_id) for r in rows] == [(3, "route-fallback")]
    assert sorted((a.attempt, a.kind, a.status_code, a.outcome, a.provider) for a in attempts) == [
        (1, "first", 503, "upstream_error", "p-first"),
        (2, "retry", None, "upstream_unreachable", "p-retry"),
        (3, "fallback", 200, "ok", "p-fallback"),
    ]
    assert all(a.request_id == "req-attempts" and a.created_at.tzinfo for a in attempts)


async def _count_records(engine: AsyncEngine) -> int:
    async with session_factory(engine)() as session:
        return len((await session.scalars(select(RequestRecord.id))).all())


async def test_sqlite_waits_out_a_lock_held_elsewhere_without_blocking_the_loop(
    engine: AsyncEngine,
) -> None:
    """Another connection (`llmrelay apply` in another process, say) holds the write lock:
    the batch is written once it is released, and requests go on being served meanwhile."""
    recorder = Recorder(engine, gather_s=0.01)
    if not isinstance(recorder._writer, SqliteWriter):
        assert engine.dialect.name == "postgresql"
        return
    path = engine.url.database
    assert path
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    recorder.start()
    for i in range(300):
        recorder.record(_record(f"locked-{i}").row(1.0))
    ticks = 0
    for _ in range(20):  # 0.4 s of a loop that must keep turning
        await asyncio.sleep(0.02)
        ticks += 1
    assert recorder.written == 0 and recorder.dropped == 0
    holder.execute("ROLLBACK")
    holder.close()
    await recorder.stop(timeout_s=10)
    assert ticks == 20
    assert recorder.written == 300 and recorder.dropped == 0
    assert await _count_records(engine) == 300


async def test_sqlite_checkpoints_the_wal_off_the_loop(engine: AsyncEngine, tmp_path: Path) -> None:
    """The recorder's connection never checkpoints on the event loop (that may wait on the
    disk); the writer's own thread does it after a commit every so many rows."""
    recorder = Recorder(engine, gather_s=0.01)
    writer = recorder._writer
    if not isinstance(writer, SqliteWriter):
        return
    record_writers.CHECKPOINT_ROWS, saved = 100, record_writers.CHECKPOINT_ROWS
    try:
        recorder.start()
        for i in range(250):
            recorder.record(_record(f"wal-{i}").row(1.0))
        await recorder.stop(timeout_s=10)
    finally:
        record_writers.CHECKPOINT_ROWS = saved
    assert await _count_records(engine) == 250
    path = engine.url.database
    assert path
    # The database file alone, without its WAL: the rows are there only if a checkpoint
    # copied them (250 rows are far below SQLite's own automatic checkpoint).
    alone = tmp_path / "alone.db"
    shutil.copyfile(path, alone)
    check = sqlite3.connect(alone)
    try:
        assert check.execute("SELECT count(*) FROM request_records").fetchone()[0] == 250
    finally:
        check.close()


# -- the database away: the spool -------------------------------------------------------------


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated SQLite file: a write lock held on it makes the recorder's writes fail."""
    engine = create_engine(await migrated_sqlite_url(tmp_path))
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def locked(
    sqlite_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> Iterator[sqlite3.Connection]:
    """Another connection holds the write lock (BEGIN IMMEDIATE) until the test rolls it
    back; the recorder gives a locked database 0.05 s instead of 30 before a write fails."""
    monkeypatch.setattr(record_writers, "LOCKED_WAIT_S", 0.05)
    path = sqlite_engine.url.database
    assert path
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    yield holder
    if holder.in_transaction:
        holder.execute("ROLLBACK")
    holder.close()


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_batches_the_database_refuses_are_spooled_then_replayed(
    sqlite_engine: AsyncEngine, locked: sqlite3.Connection, tmp_path: Path
) -> None:
    metrics = Metrics()
    spool_dir = tmp_path / "spool"
    recorder = Recorder(sqlite_engine, gather_s=0.01, spool_dir=spool_dir, metrics=metrics)
    recorder.start()
    record = _record("spooled-0")
    record.attempts = 1
    record.log_attempt("first", 503, "upstream_error", 2.0)
    recorder.record(record.row(1.0), record.attempt_log)
    for i in range(1, 300):
        recorder.record(_record(f"spooled-{i}").row(1.0))
    await _until(lambda: recorder.spooled == 300)
    assert recorder.written == 0 and recorder.dropped == 0
    assert list(spool_dir.glob("records-*.jsonl"))
    sample = metrics.registry.get_sample_value
    assert sample("llmrelay_records_spooled_total") == 300
    assert sample("llmrelay_record_spool_rows") == 301  # and the attempt row
    assert (sample("llmrelay_record_spool_bytes") or 0) > 0

    locked.execute("ROLLBACK")  # the database is back
    await _until(lambda: not list(spool_dir.glob("*.jsonl")))
    assert await _count_records(sqlite_engine) == 300
    assert sample("llmrelay_record_spool_rows") == 0
    recorder.record(_record("after").row(1.0))  # and new batches go straight in again
    await recorder.stop(timeout_s=10)
    assert (recorder.written, recorder.dropped) == (1, 0)
    assert sample("llmrelay_records_dropped_total") == 0
    async with session_factory(sqlite_engine)() as session:
        attempts = (await session.scalars(select(RequestAttempt))).all()
    assert [(a.request_id, a.status_code) for a in attempts] == [("spooled-0", 503)]


async def test_a_shutdown_while_the_database_is_away_leaves_the_records_for_the_next_start(
    sqlite_engine: AsyncEngine, locked: sqlite3.Connection, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    recorder = Recorder(sqlite_engine, gather_s=0.01, spool_dir=spool_dir)
    recorder.start()
    for i in range(50):
        recorder.record(_record(f"left-{i}").row(1.0))
    await recorder.stop(timeout_s=10)
    assert (recorder.spooled, recorder.dropped) == (50, 0)
    assert list(spool_dir.glob("*.jsonl"))

    locked.execute("ROLLBACK")
    restarted = Recorder(sqlite_engine, gather_s=0.01, spool_dir=spool_dir)
    restarted.start()  # replays what the last run left, with no request needed
    await _until(lambda: not list(spool_dir.glob("*.jsonl")))
    await restarted.stop(timeout_s=10)
    assert await _count_records(sqlite_engine) == 50


async def test_a_write_cut_off_by_the_drain_timeout_goes_to_the_spool(
    sqlite_engine: AsyncEngine,
    locked: sqlite3.Connection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(record_writers, "LOCKED_WAIT_S", 30.0)  # the write waits, and waits
    spool_dir = tmp_path / "spool"
    recorder = Recorder(sqlite_engine, gather_s=0.01, spool_dir=spool_dir)
    recorder.start()
    for i in range(20):
        recorder.record(_record(f"cut-{i}").row(1.0))
    await asyncio.sleep(0.1)  # the batch's write has begun
    recorder.record(_record("queued").row(1.0))
    await recorder.stop(timeout_s=0.2)
    assert (recorder.spooled, recorder.dropped) == (21, 0)
    locked.execute("ROLLBACK")
    restarted = Recorder(sqlite_engine, gather_s=0.01, spool_dir=spool_dir)
    restarted.start()
    await _until(lambda: not list(spool_dir.glob("*.jsonl")))
    await restarted.stop(timeout_s=10)
    assert await _count_records(sqlite_engine) == 21


async def test_a_batch_the_spool_cannot_take_is_held_until_the_database_returns(
    sqlite_engine: AsyncEngine, locked: sqlite3.Connection, tmp_path: Path
) -> None:
    not_a_folder = tmp_path / "file"  # the spool cannot be written: as a full disk
    not_a_folder.write_text("")
    metrics = Metrics()
    recorder = Recorder(sqlite_engine, gather_s=0.01, spool_dir=not_a_folder, metrics=metrics)
    with capture_logs() as logs:
        recorder.start()
        for i in range(10):
            recorder.record(_record(f"held-{i}").row(1.0))
        await _until(lambda: metrics.registry.get_sample_value("llmrelay_records_held") == 10)
        assert metrics.registry.get_sample_value("llmrelay_record_spool_write_failures_total")
        locked.execute("ROLLBACK")  # the database is back
        await _until(lambda: recorder.written == 10)
        await recorder.stop(timeout_s=10)
    assert await _count_records(sqlite_engine) == 10
    assert (recorder.spooled, recorder.dropped) == (0, 0)
    assert metrics.registry.get_sample_value("llmrelay_records_held") == 0
    failed = [entry for entry in logs if entry["event"] == "record_spool_write_failed"]
    assert failed and "File exists" in failed[0]["error"]  # the mkdir of the spool folder
    assert not [entry for entry in logs if entry["event"] == "record_batch_lost"]


async def test_held_batches_past_the_bound_or_at_shutdown_are_lost_and_counted(
    sqlite_engine: AsyncEngine, locked: sqlite3.Connection, tmp_path: Path
) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    metrics = Metrics()
    recorder = Recorder(
        sqlite_engine, max_queue=8, gather_s=0.01, spool_dir=not_a_folder, metrics=metrics
    )
    with capture_logs() as logs:
        recorder.start()
        for i in range(6):
            recorder.record(_record(f"kept-{i}").row(1.0))
        await _until(lambda: metrics.registry.get_sample_value("llmrelay_records_held") == 6)
        for i in range(6):  # 12 would pass the bound of 8: this batch is lost
            recorder.record(_record(f"over-{i}").row(1.0))
        await _until(lambda: recorder.dropped == 6)
        await recorder.stop(timeout_s=1)  # the database still away: the held 6 are lost too
    assert recorder.dropped == 12
    assert metrics.registry.get_sample_value("llmrelay_records_dropped_total") == 12
    lost = [entry for entry in logs if entry["event"] == "record_batch_lost"]
    assert [entry["rows"] for entry in lost] == [6, 6]


async def test_payload_rows_are_spooled_and_replayed_with_their_records(
    sqlite_engine: AsyncEngine, locked: sqlite3.Connection, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    recorder = Recorder(sqlite_engine, gather_s=0.01, spool_dir=spool_dir)
    recorder.start()
    body = b'{"model":"m","messages":[]}\xff'  # not UTF-8 at its end
    record = await captured_record("spooled-payload", body, b"data: x\n\n" * 50, 64)
    recorder.record(record.row(1.0), None, payload_row(record))
    await _until(lambda: recorder.spooled == 1)
    assert await _count_records(sqlite_engine) == 0

    locked.execute("ROLLBACK")  # the database is back
    await _until(lambda: not list(spool_dir.glob("*.jsonl")))
    await recorder.stop(timeout_s=10)
    async with session_factory(sqlite_engine)() as session:
        (payload,) = (await session.scalars(select(RequestPayload))).all()
    assert payload.request_id == "spooled-payload"
    assert (payload.request_body, payload.request_bytes) == (body, len(body))
    assert (payload.response_body, payload.response_bytes) == ((b"data: x\n\n" * 8)[:64], 450)
    assert (payload.request_truncated, payload.response_truncated) == (False, True)
    assert await _count_records(sqlite_engine) == 1


async def test_sqlite_writes_a_large_batch_in_short_slices(engine: AsyncEngine) -> None:
    """A batch of thousands of rows never holds the event loop for long: its statements are
    made one small chunk at a time between turns of the loop, and the COMMIT runs on the
    writer's thread. Judged by the loop thread's CPU time between two turns of a task that
    keeps yielding (CPU, not wall time: on a shared machine the core may be taken away)."""
    recorder = Recorder(engine, gather_s=0.01, batch_size=4096)
    if not isinstance(recorder._writer, SqliteWriter):
        return
    recorder.start()
    longest = 0.0
    turns = 0
    for i in range(3000):
        recorder.record(_record(f"slice-{i}").row(1.0))
    while recorder.written < 3000:
        before = time.thread_time()
        await asyncio.sleep(0)
        turns += 1
        longest = max(longest, time.thread_time() - before)
    await recorder.stop(timeout_s=10)
    assert recorder.written == 3000 and recorder.dropped == 0
    # The batch was written between many turns of the loop (a writer that converts or
    # commits it in one go gives the loop a handful), and no turn took long: a slice is
    # budgeted at 0.3 ms (record_writers.SLICE_S); the ceiling leaves room for a loaded
    # machine, where CPU time stretches too (R16: 6.2 ms beside a whole suite).
    assert turns >= 20, turns
    assert longest < 0.01, f"the loop was held for {longest * 1000:.1f} ms of CPU"


async def _slices_for(
    engine: AsyncEngine, rows: int, slice_s: float, behind: Callable[[], bool] | None = None
) -> int:
    """How many slices of the loop the SQLite writer took to insert `rows` records with the
    budget `slice_s` (and `behind`): a task that keeps yielding counts turns, and each
    statement notes the count it was made at (a new one: the loop turned since the previous
    statement)."""
    insert = Recorder(engine)._records
    turns = 0
    seen: list[int] = []

    async def spin() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    batch = [_record(f"{slice_s}-{behind is None}-{i}").row(1.0) for i in range(rows)]

    def statements() -> Iterator[tuple[str, Any]]:
        for statement in insert.chunks(batch):
            seen.append(turns)
            yield statement

    path = engine.url.database
    assert path is not None
    writer = SqliteWriter(engine, path)
    spinner = asyncio.create_task(spin())
    try:
        await writer.write(statements(), rows, slice_s, behind)
    finally:
        spinner.cancel()
        writer.close()
    return len(set(seen))


async def test_a_writer_behind_takes_longer_slices(sqlite_engine: AsyncEngine) -> None:
    """A slice comes once per turn of the loop, and on a saturated loop a turn is
    milliseconds of requests: the recorder behind its queue writes with SLICE_BEHIND_S, so
    that it writes as fast as records come (with 0.3 ms slices the queue filled at c=64)."""
    short = await _slices_for(sqlite_engine, 2000, SLICE_S)
    long = await _slices_for(sqlite_engine, 2000, SLICE_BEHIND_S)
    behind = await _slices_for(sqlite_engine, 2000, SLICE_S, lambda: True)
    # About 6x fewer (2 ms against 0.3 ms); the margin is for a loaded machine, where the
    # writer's wall clock jumps when the process is descheduled mid-statement.
    assert long * 2 < short and behind * 2 < short, (long, behind, short)
    assert await _count_records(sqlite_engine) == 6000


class _NotingWriter:
    """The real SQLite writer, noting whether the recorder was behind at each batch (a
    wrapper: the compiled build's classes cannot be subclassed from Python)."""

    def __init__(self, real: SqliteWriter) -> None:
        self.real = real
        self.budgets: list[float] = []

    async def write(
        self,
        statements: Iterable[Statement],
        rows: int,
        slice_s: float = SLICE_S,
        behind: Callable[[], bool] | None = None,
    ) -> None:
        if rows:
            assert behind is not None
            self.budgets.append(SLICE_BEHIND_S if behind() else slice_s)
        await self.real.write(statements, rows, slice_s, behind)

    async def drain(self) -> None:
        await self.real.drain()

    def close(self) -> None:
        self.real.close()


async def test_the_recorder_takes_longer_slices_only_while_it_is_behind(
    sqlite_engine: AsyncEngine,
) -> None:
    recorder = Recorder(sqlite_engine, gather_s=0.01, batch_size=500)
    path = sqlite_engine.url.database
    assert path is not None
    writer = recorder._writer = _NotingWriter(SqliteWriter(sqlite_engine, path))
    for i in range(2600):  # batches of 500 with 2,100, 1,600, 1,100, 600, 100 and 0 waiting
        recorder.record(_record(f"behind-{i}").row(1.0))
    recorder.start()
    await recorder.stop(timeout_s=30)
    assert recorder.written == 2600 and recorder.dropped == 0
    # behind from 1,024 rows waiting (recorder._BEHIND_ROWS)
    assert writer.budgets == [SLICE_BEHIND_S] * 3 + [SLICE_S] * 3

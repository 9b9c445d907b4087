"""The batched record writer, against real SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway import record_writers
from llmrelay.gateway.call import RECORD_COLUMNS, CallRecord
from llmrelay.gateway.record_writers import SQLITE_STATEMENT_ROWS, SqliteWriter
from llmrelay.gateway.recorder import Recorder
from llmrelay.store.db import session_factory
from llmrelay.store.models import RequestAttempt, RequestRecord


def _record(request_id: str) -> CallRecord:
    record = CallRecord(request_id, "chat.completions", time.perf_counter())
    record.virtual_model = "m"
    record.take_usage({"prompt_tokens": 3, "completion_tokens": 4})
    record.policy_id = "policy-1" if request_id == "req-3" else None
    return record


async def test_rows_are_written_once_each_and_read_back_by_the_orm(engine: AsyncEngine) -> None:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    for i in range(700):  # crosses several multi-row statement sizes
        recorder.record(_record(f"req-{i}").row(12.5))
    recorder.record(_record("req-3").row(99.0))  # a retried id: kept once, first write wins
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
    """The recorder's connection never checkpoints after a commit (that may wait on the
    disk, on the event loop); the writer has the engine's thread do it every so many rows."""
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

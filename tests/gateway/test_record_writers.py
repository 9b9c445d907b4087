"""The recorder's INSERT stays idempotent on the partitioned PostgreSQL table (its conflict
target then includes the partition key, created_at) and is unchanged on SQLite."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import RECORD_COLUMNS, CallRecord
from llmrelay.gateway.record_writers import InsertSql
from llmrelay.gateway.recorder import Recorder
from llmrelay.store.models import RequestRecord
from llmrelay.store.partitions import add_months, month_of


def _rows(count: int) -> list[tuple]:  # type: ignore[type-arg]
    """Records spread over this month, the last two (one before any partition existed for
    it: the default partition) and next month."""
    this_month = month_of(datetime.now(UTC))
    rows = []
    for i in range(count):
        record = CallRecord(f"twice-{i}", "chat.completions", time.perf_counter())
        moment = add_months(this_month, i % 4 - 2) + timedelta(days=i % 27, microseconds=i)
        record.created = moment.timestamp()
        record.take_usage({"prompt_tokens": i, "completion_tokens": 1})
        rows.append(record.row(float(i)))
    return rows


async def _write(engine: AsyncEngine, rows: list[tuple]) -> int:  # type: ignore[type-arg]
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    for row in rows:
        recorder.record(row)
    await recorder.stop(timeout_s=10)
    assert recorder.dropped == 0
    return recorder.written


async def test_the_conflict_target_includes_the_partition_key_on_postgres_only(
    engine: AsyncEngine,
) -> None:
    sql = InsertSql(engine, RequestRecord.__table__, RECORD_COLUMNS, ["request_id"]).sql
    if engine.dialect.name == "postgresql":
        assert "ON CONFLICT (request_id, created_at) DO NOTHING" in sql
    else:
        assert "ON CONFLICT (request_id) DO NOTHING" in sql


async def test_a_batch_written_twice_is_stored_once(engine: AsyncEngine) -> None:
    """A retried batch, or the spool replaying one after an outage, carries the same rows,
    created_at included: each is stored once, on both databases."""
    rows = _rows(40)
    assert await _write(engine, rows + rows[:10]) == 50  # twice within one batch, too
    assert await _write(engine, rows) == 40  # and again later, as a replay would
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                select(RequestRecord.request_id, func.count()).group_by(RequestRecord.request_id)
            )
        ).all()
    assert sorted(stored) == sorted((f"twice-{i}", 1) for i in range(40))


@pytest.mark.postgres
async def test_replayed_rows_stay_once_in_their_partitions(postgres_engine: AsyncEngine) -> None:
    rows = _rows(12)
    await _write(postgres_engine, rows)
    await _write(postgres_engine, list(reversed(rows)))
    async with postgres_engine.connect() as conn:
        placed = await conn.execute(
            text(
                "SELECT tableoid::regclass::text, count(*) FROM request_records"
                " GROUP BY 1 ORDER BY 1"
            )
        )
        counts: dict[str, int] = dict(placed.all())
    this_month = month_of(datetime.now(UTC))
    names = [f"request_records_{add_months(this_month, n):%Y_%m}" for n in (0, 1)]
    # The last two months have no partition in a new database: theirs are in the default.
    assert counts == {"request_records_default": 6, **dict.fromkeys(names, 3)}


async def test_booleans_and_nulls_read_back_as_written(engine: AsyncEngine) -> None:
    """SQLite binds None and bool through registered adapters (record_writers._bind_fast):
    the stored values are the same as the ORM's own, on both databases."""
    streamed = CallRecord("kinds-stream", "chat.completions", time.perf_counter())
    streamed.stream = True
    plain = CallRecord("kinds-plain", "chat.completions", time.perf_counter())
    plain.fail(502, "upstream_error")
    await _write(engine, [streamed.row(1.0), plain.row(2.0)])
    async with engine.connect() as conn:
        found = {
            row.request_id: row
            for row in await conn.execute(
                select(
                    RequestRecord.request_id,
                    RequestRecord.stream,
                    RequestRecord.error_code,
                    RequestRecord.policy_id,
                    RequestRecord.prompt_tokens,
                )
            )
        }
    assert found["kinds-stream"].stream is True
    assert found["kinds-stream"].error_code is None
    assert found["kinds-stream"].policy_id is None
    assert found["kinds-plain"].stream is False
    assert found["kinds-plain"].error_code == "upstream_error"
    assert found["kinds-plain"].prompt_tokens is None

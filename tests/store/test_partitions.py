"""The monthly partitions of request_records on PostgreSQL: created ahead by `ensure` (once,
however many replicas ask), rows that landed in the default partition moved out when their
month's partition is created, and nothing at all on SQLite."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.testing import capture_logs

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.recorder import Recorder
from llmrelay.store import migrate, partitions
from llmrelay.store.db import create_engine
from llmrelay.store.partitions import add_months, month_of, partition_name
from tests.support.databases import sqlite_url

THIS_MONTH = month_of(datetime.now(UTC))


def test_months_and_names() -> None:
    assert month_of(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == datetime(2026, 12, 1, tzinfo=UTC)
    assert add_months(datetime(2026, 11, 1, tzinfo=UTC), 2) == datetime(2027, 1, 1, tzinfo=UTC)
    assert add_months(datetime(2027, 1, 1, tzinfo=UTC), -1) == datetime(2026, 12, 1, tzinfo=UTC)
    assert add_months(datetime(2026, 1, 1, tzinfo=UTC), -13) == datetime(2024, 12, 1, tzinfo=UTC)
    assert partition_name(datetime(2027, 3, 1, tzinfo=UTC)) == "request_records_2027_03"
    march = partitions.month_of_partition("request_records_2027_03")
    assert march == datetime(2027, 3, 1, tzinfo=UTC)
    assert partitions.month_of_partition("request_records_default") is None
    assert partitions.is_partition("request_records_default")
    assert partitions.is_partition("request_records_2027_03")
    assert not partitions.is_partition("request_records")
    assert not partitions.is_partition("request_attempts")


async def _record_at(engine: AsyncEngine, request_id: str, moment: datetime) -> None:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    record = CallRecord(request_id, "chat.completions", time.perf_counter())
    record.created = moment.timestamp()
    recorder.record(record.row(1.0))
    await recorder.stop(timeout_s=10)
    assert recorder.written == 1


async def _where(engine: AsyncEngine) -> dict[str, tuple[str, int]]:
    """request id -> (the partition holding it, its id)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT request_id, tableoid::regclass::text, id FROM request_records")
        )
        return {row[0]: (row[1], row[2]) for row in rows}


async def _partitions(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        found = await partitions.partitions_of(conn)
    assert found is not None
    return found


@pytest.mark.postgres
async def test_migration_and_ensure_agree_on_the_months_ahead(
    postgres_engine: AsyncEngine,
) -> None:
    ahead = {partition_name(add_months(THIS_MONTH, n)) for n in range(3)}
    assert await _partitions(postgres_engine) == {*ahead, "request_records_default"}
    assert await partitions.ensure(postgres_engine) == []  # the migration made them all
    later = add_months(THIS_MONTH, 1)
    assert await partitions.ensure(postgres_engine, now=later) == [
        partition_name(add_months(THIS_MONTH, 3))
    ]
    assert await partitions.ensure(postgres_engine, now=later) == []


@pytest.mark.postgres
async def test_replicas_ensuring_together_create_each_partition_once(
    postgres_engine: AsyncEngine, postgres_url: str
) -> None:
    others = [create_engine(postgres_url) for _ in range(3)]
    try:
        future = add_months(THIS_MONTH, 12)
        results = await asyncio.gather(
            *(partitions.ensure(engine, now=future) for engine in (postgres_engine, *others))
        )
    finally:
        for engine in others:
            await engine.dispose()
    created = sorted(name for result in results for name in result)
    assert created == sorted(partition_name(add_months(future, n)) for n in range(3))


@pytest.mark.postgres
async def test_a_record_of_a_month_without_a_partition_lands_in_it_once_created(
    postgres_engine: AsyncEngine,
) -> None:
    """A clock far ahead: the record goes to the default partition (no insert fails), and
    moves to its month's partition, with its id, when `ensure` creates that month."""
    far = add_months(THIS_MONTH, 5) + timedelta(days=3, hours=7)
    await _record_at(postgres_engine, "far-ahead", far)
    await _record_at(postgres_engine, "today", datetime.now(UTC))
    before = await _where(postgres_engine)
    assert before["far-ahead"][0] == "request_records_default"
    assert before["today"][0] == partition_name(THIS_MONTH)

    with capture_logs() as logs:
        assert await partitions.ensure(postgres_engine) == []
    assert [e["rows"] for e in logs if e["event"] == "records_in_default_partition"] == [1]

    month = month_of(far)
    with capture_logs() as logs:
        created = await partitions.ensure(postgres_engine, now=add_months(month, -2))
    assert created == [partition_name(add_months(month, n)) for n in (-2, -1, 0)]
    moved = [e for e in logs if e["event"] == "records_moved_out_of_default_partition"]
    assert [(e["partition"], e["rows"]) for e in moved] == [(partition_name(month), 1)]
    assert not [e for e in logs if e["event"] == "records_in_default_partition"]
    after = await _where(postgres_engine)
    assert after == {**before, "far-ahead": (partition_name(month), before["far-ahead"][1])}
    async with postgres_engine.connect() as conn:
        kept = (
            await conn.execute(
                text("SELECT created_at FROM request_records WHERE id = :i"),
                {"i": after["far-ahead"][1]},
            )
        ).scalar_one()
    assert kept == far

    # Written again (a replay): the same row, in the same partition, still once.
    await _record_at(postgres_engine, "far-ahead", far)
    assert await _where(postgres_engine) == after


@pytest.mark.postgres
async def test_rows_in_the_default_partition_are_reported_each_round(
    postgres_engine: AsyncEngine,
) -> None:
    await _record_at(postgres_engine, "long-ago", datetime.now(UTC) - timedelta(days=800))
    assert (await _where(postgres_engine))["long-ago"][0] == "request_records_default"
    with capture_logs() as logs:
        assert await partitions.ensure(postgres_engine) == []
    warned = [e for e in logs if e["event"] == "records_in_default_partition"]
    assert [(e["log_level"], e["rows"]) for e in warned] == [("warning", 1)]


async def test_sqlite_has_no_partitions(tmp_path: Path) -> None:
    engine = create_engine(sqlite_url(tmp_path))
    try:
        await migrate.upgrade(engine)
        assert await partitions.ensure(engine) == []
        assert await partitions.drop_before(engine, datetime.now(UTC)) == []
        await asyncio.wait_for(partitions.run(engine), 1)  # returns at once
    finally:
        await engine.dispose()

"""Hourly usage rollups: recomputed whole from records, exact whether an hour is rolled up
or not, never double-counting a replayed batch, and never losing a batch committed while
its hour was being recomputed. On SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.recorder import Recorder
from llmrelay.limits.spend import month_spend
from llmrelay.metering.cost import Price
from llmrelay.store import rollups
from llmrelay.store.models import RequestRecord, UsageRollup, UsageRollupDirty

BASE = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)


def _record(i: int, minutes: float, project: str, latency_ms: float = 10.0) -> tuple[tuple, float]:  # type: ignore[type-arg]
    record = CallRecord(f"roll-{i}", "chat.completions", time.perf_counter())
    record.created = (BASE + timedelta(minutes=minutes)).timestamp()
    record.project_id, record.key_id, record.tenant_id = project, f"{project}-key", "t1"
    record.virtual_model, record.provider = "chat", "up"
    record.attempts = 1
    record.price = Price("v1", input=1_000_000, output=2_000_000)
    record.take_usage({"prompt_tokens": 10 + i, "completion_tokens": 3})
    return record.row(latency_ms), latency_ms


async def _write(engine: AsyncEngine, rows: list[tuple]) -> None:  # type: ignore[type-arg]
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    for row in rows:
        recorder.record(row)
    await recorder.stop(timeout_s=10)


async def _direct(engine: AsyncEngine, since: datetime, until: datetime) -> tuple[int, int, int]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(
                    func.count(),
                    func.sum(RequestRecord.prompt_tokens),
                    func.sum(RequestRecord.cost_micros),
                ).where(RequestRecord.created_at >= since, RequestRecord.created_at < until)
            )
        ).one()
    return int(row[0]), int(row[1] or 0), int(row[2] or 0)


async def _summed(
    engine: AsyncEngine, since: datetime | None, until: datetime | None
) -> tuple[int, int, int]:
    async with engine.connect() as conn:
        found = await rollups.cells(conn, rollups.Dimensions(), since, until, None, False)
    total = rollups.Cell()
    for cell in found.values():
        total.add(cell.sums, (), ())
    return total.sums["requests"], total.sums["prompt_tokens"], total.sums["cost_micros"]


async def test_answers_are_exact_before_and_after_the_hours_are_rolled_up(
    engine: AsyncEngine,
) -> None:
    rows = [_record(i, minutes=i * 7.5, project="p1" if i % 2 else "p2")[0] for i in range(30)]
    await _write(engine, rows)
    since, until = BASE + timedelta(minutes=50), BASE + timedelta(minutes=190)  # partial hours
    expected = await _direct(engine, since, until)
    assert expected[0] > 0
    assert await _summed(engine, since, until) == expected  # all from records (dirty)

    assert await rollups.refresh(engine) == 4  # the four hours the records fall in
    async with engine.connect() as conn:
        assert (
            await conn.execute(select(func.count()).select_from(UsageRollupDirty))
        ).scalar() == 0
        rolled = (await conn.execute(select(func.count()).select_from(UsageRollup))).scalar()
    assert rolled == 8  # 4 hours x 2 projects
    assert await _summed(engine, since, until) == expected  # full hours from rollups now
    everything = await _direct(engine, BASE - timedelta(days=1), BASE + timedelta(days=1))
    assert await _summed(engine, None, None) == everything


async def test_a_replayed_batch_counts_once(engine: AsyncEngine) -> None:
    rows = [_record(i, minutes=i, project="p1")[0] for i in range(10)]
    await _write(engine, rows)
    await rollups.refresh(engine)
    await _write(engine, rows)  # the same batch again (a spool replay, a retry)
    await rollups.refresh(engine)
    assert await _summed(engine, None, None) == (
        10,
        sum(10 + i for i in range(10)),
        sum(10 + i + 3 * 2 for i in range(10)),  # 1 and 2 micro-USD a token
    )


async def test_a_batch_committed_during_a_recompute_keeps_its_hour_dirty(
    engine: AsyncEngine,
) -> None:
    await _write(engine, [_record(0, minutes=5, project="p1")[0]])
    async with engine.connect() as conn:
        hour, version = (
            await conn.execute(select(UsageRollupDirty.hour, UsageRollupDirty.version))
        ).one()
    # A recompute read the mark (version) and the records; then another batch lands.
    async with engine.begin() as conn:
        await rollups.recompute(conn, hour)
    await _write(engine, [_record(1, minutes=6, project="p1")[0]])
    async with engine.begin() as conn:
        cleared = await conn.execute(
            delete(UsageRollupDirty).where(
                UsageRollupDirty.hour == hour, UsageRollupDirty.version == version
            )
        )
    assert cleared.rowcount == 0  # the later batch bumped the version: still dirty
    assert (await _summed(engine, None, None))[0] == 2  # and read from the records
    await rollups.refresh(engine)
    assert (await _summed(engine, None, None))[0] == 2


async def test_percentiles_fall_in_the_bin_of_the_true_value(engine: AsyncEngine) -> None:
    latencies = [5.0] * 50 + [40.0] * 40 + [900.0] * 10
    rows = [
        _record(i, minutes=10, project="p1", latency_ms=ms)[0] for i, ms in enumerate(latencies)
    ]
    await _write(engine, rows)
    await rollups.refresh(engine)
    async with engine.connect() as conn:
        found = await rollups.cells(conn, rollups.Dimensions(), None, None, None, True)
    (cell,) = found.values()
    p50, p95 = rollups.quantile(cell.latency, 0.5), rollups.quantile(cell.latency, 0.95)
    assert p50 is not None and p95 is not None
    assert 5.0 / 1.5 <= p50 <= 5.0 * 1.5
    assert 900.0 / 1.5 <= p95 <= 900.0 * 1.5


async def test_budgets_start_from_the_rollups_and_the_hours_not_rolled_up(
    engine: AsyncEngine,
) -> None:
    rows = [_record(i, minutes=i * 20, project="p1" if i < 6 else "p2")[0] for i in range(9)]
    await _write(engine, rows[:5])
    await rollups.refresh(engine)
    await _write(engine, rows[5:])  # not rolled up yet
    now = (BASE + timedelta(hours=4)).timestamp()
    spend = await month_spend(engine, now)
    async with engine.connect() as conn:
        since = BASE.replace(day=1, hour=0)
        direct = dict(
            (
                await conn.execute(
                    select(RequestRecord.project_id, func.sum(RequestRecord.cost_micros))
                    .where(RequestRecord.created_at >= since)
                    .group_by(RequestRecord.project_id)
                )
            ).all()
        )
    assert spend["project:p1"] == direct["p1"] and spend["project:p2"] == direct["p2"]
    assert spend["key:p1-key"] == direct["p1"]


async def test_the_hour_in_progress_is_read_from_records_not_recomputed(
    engine: AsyncEngine,
) -> None:
    record = CallRecord("roll-now", "chat.completions", time.perf_counter())
    record.attempts = 1
    record.take_usage({"prompt_tokens": 5, "completion_tokens": 1})
    await _write(engine, [record.row(1.0)])
    assert await rollups.refresh(engine) == 0  # the hour has not ended
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(UsageRollup))).scalar() == 0
    assert (await _summed(engine, None, None))[:2] == (1, 5)
    later = time.time() + 2 * 3600
    assert await rollups.refresh(engine, now=later) == 1  # once it ended, it is rolled up
    assert (await _summed(engine, None, None))[:2] == (1, 5)

"""Records older than the retention period are deleted in batches; newer ones stay."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.recorder import Recorder
from llmrelay.store import partitions, retention
from llmrelay.store.models import RequestAttempt, RequestRecord
from llmrelay.store.models_guardrails import GuardrailHit
from llmrelay.store.partitions import add_months, month_of, partition_name

DAY = 86_400.0


def _record(request_id: str, created: float, failed_attempt: bool = False) -> CallRecord:
    record = CallRecord(request_id, "chat.completions", time.perf_counter())
    record.created = created
    record.attempts = 1
    if failed_attempt:
        record.log_attempt("first", 500, "upstream_error", 3.0)
        assert record.attempt_log is not None
        row = record.attempt_log[0]  # an attempt happens when its request does
        record.attempt_log[0] = (*row[:2], created, *row[3:])
    return record


async def _count(engine: AsyncEngine, table: type[RequestRecord | RequestAttempt]) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


async def test_prune_deletes_only_what_is_older_than_the_period(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "BATCH_ROWS", 7)  # several batches
    now = time.time()
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    old = [_record(f"old-{i}", now - 40 * DAY - i, failed_attempt=i % 3 == 0) for i in range(30)]
    new = [_record(f"new-{i}", now - 10 * DAY - i, failed_attempt=i % 3 == 0) for i in range(5)]
    for record in (*old, *new):
        hit = (record.request_id, 0, record.created, "t", "p", "k", "pol", "pol", "pii")
        hits = [(*hit, "email", "mask", "request", "messages[0].content", 1, 16)]
        recorder.record(record.row(1.0), record.attempt_log, None, hits)
    await recorder.stop(timeout_s=10)
    assert await _count(engine, RequestRecord) == 35

    assert await retention.prune(engine, 30, now) == retention.Pruned(deleted=30)
    async with engine.connect() as conn:
        kept = {row[0] for row in await conn.execute(select(RequestRecord.request_id))}
        attempts = {row[0] for row in await conn.execute(select(RequestAttempt.request_id))}
    assert kept == {f"new-{i}" for i in range(5)}
    assert attempts == {"new-0", "new-3"}
    async with engine.connect() as conn:
        hit_ids = {row[0] for row in await conn.execute(select(GuardrailHit.request_id))}
    assert hit_ids == kept  # a record's hits go with it
    assert await retention.prune(engine, 30, now) == retention.Pruned()  # nothing left to do


@pytest.mark.postgres
async def test_postgres_drops_old_months_whole_and_deletes_the_rest_in_batches(
    postgres_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Months wholly older than the cutoff go as partitions (DROP TABLE); the month that
    straddles the cutoff, and the default partition, lose their old rows in batches."""
    engine = postgres_engine
    monkeypatch.setattr(retention, "BATCH_ROWS", 2)  # several batches
    now = time.time()
    this_month = month_of(datetime.fromtimestamp(now, UTC))
    straddling = add_months(this_month, -2)
    cutoff = straddling + timedelta(days=10)
    for month in (add_months(this_month, -4), straddling):  # each with the next two
        await partitions.ensure(engine, now=month)
    at = {
        "m4-a": add_months(this_month, -4) + timedelta(days=1),
        "m4-b": add_months(this_month, -4) + timedelta(days=20),
        "m3-a": add_months(this_month, -3),
        "m3-b": straddling - timedelta(microseconds=1),  # the last instant of its month
        "m2-old-a": straddling + timedelta(days=1),
        "m2-old-b": straddling + timedelta(days=5),
        "m2-old-c": cutoff - timedelta(seconds=1),
        "m2-new-a": cutoff,
        "m2-new-b": straddling + timedelta(days=20),
        "m1": add_months(this_month, -1) + timedelta(days=3),
        "now": datetime.fromtimestamp(now, UTC),
        "ancient": this_month - timedelta(days=900),  # no partition: the default one
    }
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    for request_id, moment in at.items():
        recorder.record(_record(request_id, moment.timestamp(), failed_attempt=True).row(1.0))
    await recorder.stop(timeout_s=10)
    async with engine.connect() as conn:
        homes: dict[str, str] = dict(
            (
                await conn.execute(
                    text("SELECT request_id, tableoid::regclass::text FROM request_records")
                )
            ).all()
        )
    assert homes["ancient"] == "request_records_default"
    assert homes["m3-b"] == partition_name(add_months(this_month, -3))

    pruned = await retention.prune(engine, (now - cutoff.timestamp()) / DAY, now)
    doomed = (
        partition_name(add_months(this_month, -4)),
        partition_name(add_months(this_month, -3)),
    )
    assert pruned == retention.Pruned(deleted=4, dropped=doomed)
    async with engine.connect() as conn:
        kept = {row[0] for row in await conn.execute(select(RequestRecord.request_id))}
        gone = await conn.execute(
            text("SELECT relname FROM pg_class WHERE relname = ANY(:names)"),
            {"names": list(doomed)},
        )
        assert gone.all() == []
        left = await partitions.partitions_of(conn)
    assert kept == {"m2-new-a", "m2-new-b", "m1", "now"}
    assert left is not None and partition_name(straddling) in left
    assert not left & set(doomed)
    assert (
        await retention.prune(engine, (now - cutoff.timestamp()) / DAY, now) == retention.Pruned()
    )

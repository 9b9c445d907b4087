"""Records older than the retention period are deleted in batches; newer ones stay."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.recorder import Recorder
from llmrelay.store import retention
from llmrelay.store.models import RequestAttempt, RequestRecord

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


async def _count(engine: AsyncEngine, table: type[RequestRecord] | type[RequestAttempt]) -> int:
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
        recorder.record(record.row(1.0), record.attempt_log)
    await recorder.stop(timeout_s=10)
    assert await _count(engine, RequestRecord) == 35

    assert await retention.prune(engine, 30, now) == 30
    async with engine.connect() as conn:
        kept = {row[0] for row in await conn.execute(select(RequestRecord.request_id))}
        attempts = {row[0] for row in await conn.execute(select(RequestAttempt.request_id))}
    assert kept == {f"new-{i}" for i in range(5)}
    assert attempts == {"new-0", "new-3"}
    assert await retention.prune(engine, 30, now) == 0  # nothing left to do

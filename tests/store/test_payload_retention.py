"""Captured payloads older than their retention are deleted in batches; their records stay,
and payloads are never kept longer than the records' retention."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.recorder import Recorder
from llmrelay.store import payload_retention
from llmrelay.store.models import RequestPayload, RequestRecord
from tests.gateway.test_capture import captured_record, payload_row

DAY = 86_400.0


async def _ids(engine: AsyncEngine, table: type[RequestPayload] | type[RequestRecord]) -> set[str]:
    async with engine.connect() as conn:
        return {row[0] for row in await conn.execute(select(table.request_id))}


async def test_prune_deletes_only_payloads_older_than_the_period(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload_retention, "BATCH_ROWS", 4)  # several batches
    now = time.time()
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    ages = {f"old-{i}": 8 * DAY + i for i in range(10)} | {f"new-{i}": 6 * DAY for i in range(3)}
    for request_id, age in ages.items():
        record = await captured_record(request_id, b"{}", b'{"ok":true}', 1000)
        record.created = now - age
        recorder.record(record.row(1.0), None, payload_row(record))
    await recorder.stop(timeout_s=10)

    assert await payload_retention.prune(engine, 7, now) == 10
    assert await _ids(engine, RequestPayload) == {f"new-{i}" for i in range(3)}
    assert await _ids(engine, RequestRecord) == set(ages)  # records have their own retention
    assert await payload_retention.prune(engine, 7, now) == 0


def test_payloads_are_kept_no_longer_than_their_records() -> None:
    shorter = payload_retention.retention_days
    assert shorter(None, None) is None  # kept as long as the records: for ever
    assert shorter(7, None) == 7
    assert shorter(None, 30) == 30  # go when their records go
    assert shorter(7, 30) == 7
    assert shorter(90, 30) == 30  # never outlive their records

"""Record and payload retention as periodic jobs, on SQLite and PostgreSQL: two runners on one
database (each with its own engine, as two replicas) run each kind once per time slot, and the
old records and payloads go; and finished jobs past the expiry they were queued with (a
background response's) are pruned with the others."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.recorder import Recorder
from llmrelay.jobs import queue, retention
from llmrelay.jobs.kinds import JobContext, JobKind
from llmrelay.jobs.runner import JobRunner, RunnerOptions
from llmrelay.settings import Settings
from llmrelay.store import migrate
from llmrelay.store.db import create_engine
from llmrelay.store.models import RequestPayload, RequestRecord
from llmrelay.store.models_jobs import Job
from tests.gateway.test_capture import captured_record, payload_row
from tests.jobs.ops_support import services

DAY = 86_400.0
FAST = RunnerOptions(concurrency=4, lease_s=5.0, poll_s=0.05, housekeeping_s=0.2)


async def _seed(engine: AsyncEngine, now: float) -> None:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    for request_id, age in (("ancient", 400), ("old", 31), ("week", 8), ("recent", 1)):
        record = await captured_record(request_id, b"{}", b'{"ok":true}', 1000)
        record.created = now - age * DAY
        recorder.record(record.row(1.0), None, payload_row(record))
    await recorder.stop(timeout_s=10)


async def _ids(engine: AsyncEngine, table: Any) -> set[str]:
    async with engine.connect() as conn:
        return {row[0] for row in await conn.execute(select(table.request_id))}


def test_retention_is_scheduled_only_when_a_period_is_set() -> None:
    kinds = [s.kind for s in retention.schedules(Settings(database_url="sqlite://"))]
    assert kinds == []
    only_payloads = Settings(database_url="sqlite://", payload_retention_days=7)
    assert [s.kind for s in retention.schedules(only_payloads)] == ["payload_retention"]
    both = Settings(database_url="sqlite://", record_retention_days=30, retention_interval_s=60)
    assert [(s.kind, s.interval_s) for s in retention.schedules(both)] == [
        ("record_retention", 60),
        ("payload_retention", 60),
    ]


async def test_two_replicas_prune_once_per_slot(database_url: str) -> None:
    engines = [create_engine(database_url) for _ in range(2)]
    await migrate.upgrade(engines[0])
    runs: Counter[str] = Counter()
    try:
        now = time.time()
        # The runners' clock stands still inside one hour's slot: no second slot can begin.
        slot = (now // 3600) * 3600 + 1
        await _seed(engines[0], now)
        settings = {"record_retention_days": 30, "payload_retention_days": 7}
        runners = []
        for engine in engines:
            offered = services(engine, None, **settings)  # type: ignore[arg-type]
            kinds = [_counted(kind, runs) for kind in retention.kinds()]
            schedule = retention.schedules(offered.settings)
            runners.append(
                JobRunner(
                    engine,
                    kinds,
                    services=offered,
                    options=FAST,
                    schedules=schedule,
                    clock=lambda: slot,
                )
            )
        for runner in runners:  # both queue the slot's jobs: one of each is kept
            await runner.housekeeping(slot)
        await asyncio.gather(*(runner.run_until_idle() for runner in runners))
        assert runs == {"record_retention": 1, "payload_retention": 1}
        assert await _ids(engines[0], RequestRecord) == {"week", "recent"}
        assert await _ids(engines[0], RequestPayload) == {"recent"}
        async with engines[0].connect() as conn:
            jobs = (await conn.execute(select(Job.kind, Job.status, Job.result))).all()
        by_kind = {kind: (status, result) for kind, status, result in jobs}
        assert by_kind["record_retention"] == (
            "succeeded",
            {"deleted": 2, "partitions_dropped": []},
        )
        assert by_kind["payload_retention"] == ("succeeded", {"deleted": 3})
        # The same slot again, from either replica: already done, nothing queued.
        for runner in runners:
            await runner.housekeeping(slot + 1)
            assert await runner.run_round() == 0
        assert sum(runs.values()) == 2
    finally:
        for engine in engines:
            await engine.dispose()


def _counted(kind: JobKind, runs: Counter[str]) -> JobKind:
    async def run(context: JobContext) -> dict[str, Any] | None:
        runs[kind.name] += 1
        return await kind.run(context)

    return JobKind(kind.name, run, max_attempts=kind.max_attempts, release_dedupe=False)


async def test_finished_jobs_past_their_queued_expiry_are_pruned(engine: AsyncEngine) -> None:
    now = 1_800_000_000.0
    async with engine.begin() as conn:
        short = await queue.enqueue(conn, "background", {}, now=now, expires_at=now + 100)
        kept = await queue.enqueue(conn, "other", {}, now=now)
    claimed = await queue.claim(engine, "w", ["background", "other"], limit=2, lease_s=10, now=now)
    for job in claimed:  # ended without a new expiry: the queued one stands
        await queue.succeed(engine, job.id, job.epoch, now=now + 1)
    assert await queue.prune(engine, now=now + 99, keep_finished_s=7 * DAY) == 0
    assert await queue.prune(engine, now=now + 101, keep_finished_s=7 * DAY) == 1
    async with engine.connect() as conn:
        left = (await conn.execute(select(Job.id))).scalars().all()
    assert left == [kept] and short not in left

"""The job runner against real databases: results, retries, cancels, graceful stops,
periodic slots, and two runners claiming the same queue (each job run exactly once)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import queue
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind, RetryLater
from llmrelay.jobs.runner import JobRunner, RunnerOptions, Schedule
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import create_engine
from llmrelay.store.models_jobs import Job

FAST = RunnerOptions(concurrency=8, lease_s=3.0, poll_s=0.05, housekeeping_s=0.2)


async def _add(engine: AsyncEngine, kind: str, payload: dict[str, Any] | None = None) -> str:
    async with engine.begin() as conn:
        job_id = await queue.enqueue(conn, kind, payload, now=time.time(), max_attempts=3)
    assert job_id is not None
    return job_id


async def _job(engine: AsyncEngine, job_id: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(select(Job.__table__).where(Job.id == job_id))).one()


def _epoch(at: datetime) -> float:
    """A stored time as a timestamp (SQLite gives it back without its zone, UTC)."""
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


async def _wait_for(engine: AsyncEngine, job_id: str, status: str, timeout_s: float = 10) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        row = await _job(engine, job_id)
        if row.status == status:
            return row
        assert time.monotonic() < deadline, f"job {job_id} is {row.status}, not {status}"
        await asyncio.sleep(0.05)


async def test_results_retries_and_failures(engine: AsyncEngine) -> None:
    calls: Counter[str] = Counter()

    async def double(context: JobContext) -> dict[str, Any]:
        return {"twice": context.payload["n"] * 2}

    async def flaky(context: JobContext) -> dict[str, Any]:
        calls["flaky"] += 1
        if context.job.attempts < 2:
            raise RetryLater("not yet", delay_s=0)
        return {"attempt": context.job.attempts}

    async def refuses(context: JobContext) -> None:
        calls["refuses"] += 1
        raise GiveUp("never", result={"why": "bad input"})

    async def crashes(context: JobContext) -> None:
        calls["crashes"] += 1
        raise ZeroDivisionError("bug")

    kinds = [
        JobKind("double", double),
        JobKind("flaky", flaky),
        JobKind("refuses", refuses),
        JobKind("crashes", crashes, backoff=lambda n: 0.0),
    ]
    runner = JobRunner(engine, kinds, options=FAST)
    ids = {kind.name: await _add(engine, kind.name, {"n": 21}) for kind in kinds}
    await runner.run_until_idle()
    assert (await _job(engine, ids["double"])).result == {"twice": 42}
    flaky_row = await _job(engine, ids["flaky"])
    assert (flaky_row.status, flaky_row.result, flaky_row.attempts) == (
        "succeeded",
        {"attempt": 2},
        2,
    )
    refused = await _job(engine, ids["refuses"])
    assert (refused.status, refused.error, refused.result) == (
        "failed",
        "never",
        {"why": "bad input"},
    )
    crashed = await _job(engine, ids["crashes"])
    assert crashed.status == "failed" and crashed.attempts == 3
    assert "ZeroDivisionError: bug" in crashed.error
    assert calls == {"flaky": 2, "refuses": 1, "crashes": 3}


async def test_sealed_results_open_only_with_the_key(engine: AsyncEngine) -> None:
    sealer = Sealer("k" * 40 + "sealed-results-secret")

    async def answer(context: JobContext) -> dict[str, Any]:
        context.seal_result({"text": f"answer to {context.secret_payload()['question']}"})
        return {"done": True}

    runner = JobRunner(engine, [JobKind("answer", answer)], sealer=sealer, options=FAST)
    job_id = "a" * 32
    async with engine.begin() as conn:
        await queue.enqueue(
            conn,
            "answer",
            now=time.time(),
            job_id=job_id,
            payload_sealed=sealer.seal(b'{"question": "life"}', context=job_id),
        )
    await runner.run_until_idle()
    row = await _job(engine, job_id)
    assert "life" not in str(row.result_sealed) and row.result == {"done": True}
    assert sealer.open(row.result_sealed, context=job_id) == b'{"text":"answer to life"}'


async def test_cancel_and_graceful_stop(engine: AsyncEngine) -> None:
    started: dict[str, asyncio.Event] = {}

    async def forever(context: JobContext) -> None:
        started[context.payload["name"]].set()
        await asyncio.sleep(3600)

    runner = JobRunner(
        engine,
        [JobKind("forever", forever)],
        # A lease of 2 s: a heartbeat every 0.67 s, so a process starved of CPU for well
        # over a second (a loaded CI machine) still keeps its jobs.
        options=RunnerOptions(concurrency=4, lease_s=2.0, poll_s=0.05, housekeeping_s=0.2),
    )
    started.update(doomed=asyncio.Event(), kept=asyncio.Event())
    doomed = await _add(engine, "forever", {"name": "doomed"})
    kept = await _add(engine, "forever", {"name": "kept"})
    runner.start()
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 10)
    first_lease = _epoch((await _job(engine, kept)).lease_until)
    # Past the first lease, with housekeeping running all along: heartbeats kept it.
    deadline = time.monotonic() + 30
    while _epoch((row := await _job(engine, kept)).lease_until) <= first_lease or (
        time.time() <= first_lease
    ):
        assert time.monotonic() < deadline, "the kept job's lease was never renewed"
        await asyncio.sleep(0.05)
    assert row.status == "running"
    async with engine.begin() as conn:
        assert await queue.request_cancel(conn, doomed, now=time.time()) == "running"
    await _wait_for(engine, doomed, "cancelled")
    await runner.stop(timeout_s=0.1)
    row = await _job(engine, kept)
    # Given back at once, without spending its attempt.
    assert (row.status, row.attempts, row.lease_owner) == ("queued", 0, None)


async def test_a_dead_workers_job_is_run_again_after_its_lease(engine: AsyncEngine) -> None:
    async def works(context: JobContext) -> dict[str, Any]:
        return {"epoch": context.job.epoch}

    job_id = await _add(engine, "works")
    # A worker claimed it and died: no heartbeat, no end.
    await queue.claim(engine, "dead", ["works"], limit=1, lease_s=0.3, now=time.time())
    runner = JobRunner(engine, [JobKind("works", works)], options=FAST)
    runner.start()
    try:
        row = await _wait_for(engine, job_id, "succeeded")
    finally:
        await runner.stop()
    assert row.result == {"epoch": 2} and row.attempts == 2


async def test_periodic_jobs_run_once_per_slot_across_runners(engine: AsyncEngine) -> None:
    async def tick(context: JobContext) -> None:
        return None

    kind = JobKind("tick", tick, release_dedupe=False)
    schedule = [Schedule("tick", interval_s=3600)]
    runners = [JobRunner(engine, [kind], schedules=schedule, options=FAST) for _ in range(3)]
    for runner in runners:
        await runner.housekeeping(time.time())
        await runner.housekeeping(time.time())
    async with engine.connect() as conn:
        count = (await conn.execute(select(func.count()).select_from(Job))).scalar_one()
    assert count == 1
    await runners[0].run_until_idle()
    await runners[1].housekeeping(time.time())
    async with engine.connect() as conn:
        states = (await conn.execute(select(Job.status))).scalars().all()
    assert states == ["succeeded"]


async def test_two_runners_run_each_job_exactly_once(database_url: str) -> None:
    """Two runners, each with its own engine (its own connections), drain one queue."""
    engines = [create_engine(database_url) for _ in range(2)]
    from llmrelay.store import migrate

    await migrate.upgrade(engines[0])
    runs: Counter[str] = Counter()
    by_runner: Counter[int] = Counter()

    def kind_for(index: int) -> JobKind:
        async def record(context: JobContext) -> dict[str, Any]:
            runs[context.id] += 1
            by_runner[index] += 1
            await asyncio.sleep(0.002)
            return {"runner": index}

        return JobKind("count", record)

    try:
        ids = [await _add(engines[0], "count") for _ in range(150)]
        runners = [JobRunner(engines[i], [kind_for(i)], options=FAST) for i in range(2)]
        await asyncio.gather(*(runner.run_until_idle(timeout_s=60) for runner in runners))
        assert set(runs) == set(ids)
        assert set(runs.values()) == {1}
        assert by_runner[0] > 0 and by_runner[1] > 0, by_runner
        async with engines[0].connect() as conn:
            rows = (await conn.execute(select(Job.status, Job.epoch, Job.attempts))).all()
        assert {tuple(row) for row in rows} == {("succeeded", 1, 1)}
    finally:
        for engine in engines:
            await engine.dispose()

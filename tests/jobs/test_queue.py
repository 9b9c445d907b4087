"""The job queue on SQLite and PostgreSQL: claims, fencing by epoch, retries, cancels,
expired leases, dedupe keys and pruning."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import queue
from llmrelay.jobs.queue import LeaseLost
from llmrelay.store.models_jobs import Job

NOW = 1_800_000_000.0


async def _add(engine: AsyncEngine, kind: str = "k", **options: object) -> str | None:
    async with engine.begin() as conn:
        return await queue.enqueue(conn, kind, {"n": 1}, now=NOW, **options)  # type: ignore[arg-type]


async def _row(engine: AsyncEngine, job_id: str) -> Job:
    async with engine.connect() as conn:
        row = (await conn.execute(select(Job.__table__).where(Job.id == job_id))).one()
    return row  # type: ignore[return-value]


async def test_a_claim_takes_due_jobs_of_known_kinds_once(engine: AsyncEngine) -> None:
    first = await _add(engine)
    later = await _add(engine, run_at=NOW + 60)
    other = await _add(engine, kind="other")
    claimed = await queue.claim(engine, "w1", ["k"], limit=10, lease_s=30, now=NOW)
    assert [job.id for job in claimed] == [first]
    assert claimed[0].epoch == 1 and claimed[0].attempts == 1
    assert claimed[0].payload == {"n": 1}
    assert await queue.claim(engine, "w2", ["k"], limit=10, lease_s=30, now=NOW) == []
    row = await _row(engine, str(first))
    assert row.status == "running" and row.lease_owner == "w1"
    # The one due later is claimed when it is due; the other kind never by this worker.
    due = await queue.claim(engine, "w2", ["k"], limit=10, lease_s=30, now=NOW + 61)
    assert [job.id for job in due] == [later]
    assert (await _row(engine, str(other))).status == "queued"


async def test_writes_of_a_worker_that_lost_its_lease_are_fenced_out(engine: AsyncEngine) -> None:
    job_id = str(await _add(engine))
    (old,) = await queue.claim(engine, "w1", ["k"], limit=1, lease_s=10, now=NOW)
    assert await queue.repair_expired(engine, now=NOW + 11) == (1, 0)
    (new,) = await queue.claim(engine, "w2", ["k"], limit=1, lease_s=10, now=NOW + 12)
    assert (new.epoch, new.attempts) == (2, 2)
    for write in (
        queue.heartbeat(engine, job_id, old.epoch, lease_s=10, now=NOW + 13),
        queue.save_checkpoint(engine, job_id, old.epoch, {"stage": "x"}, now=NOW + 13),
        queue.succeed(engine, job_id, old.epoch, now=NOW + 13, result={"by": "w1"}),
        queue.fail(engine, job_id, old.epoch, "boom", now=NOW + 13, retry_at=None),
    ):
        with pytest.raises(LeaseLost):
            await write
    await queue.save_checkpoint(engine, job_id, new.epoch, {"stage": "y"}, now=NOW + 13)
    await queue.succeed(engine, job_id, new.epoch, now=NOW + 14, result={"by": "w2"})
    row = await _row(engine, job_id)
    assert (row.status, row.result, row.checkpoint) == ("succeeded", {"by": "w2"}, {"stage": "y"})
    assert row.lease_owner is None and row.finished_at is not None


async def test_a_failed_attempt_is_retried_until_attempts_run_out(engine: AsyncEngine) -> None:
    job_id = str(await _add(engine, max_attempts=2))
    (one,) = await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW)
    state = await queue.fail(engine, job_id, one.epoch, "first", now=NOW, retry_at=NOW + 5)
    assert state == "queued"
    assert await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW + 4) == []
    (two,) = await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW + 5)
    state = await queue.fail(engine, job_id, two.epoch, "second", now=NOW + 5, retry_at=NOW + 9)
    assert state == "failed"
    row = await _row(engine, job_id)
    assert (row.status, row.error, row.attempts) == ("failed", "second", 2)


async def test_reschedule_does_not_spend_an_attempt(engine: AsyncEngine) -> None:
    job_id = str(await _add(engine, max_attempts=1))
    for round_ in range(3):
        (job,) = await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW + round_ * 10)
        assert job.attempts == 1
        await queue.reschedule(engine, job_id, job.epoch, run_at=NOW + (round_ + 1) * 10, now=NOW)
    assert (await _row(engine, job_id)).status == "queued"


async def test_expired_leases_with_no_attempts_left_fail(engine: AsyncEngine) -> None:
    job_id = str(await _add(engine, max_attempts=1))
    await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW)
    assert await queue.repair_expired(engine, now=NOW + 5) == (0, 0)  # still leased
    assert await queue.repair_expired(engine, now=NOW + 11) == (0, 1)
    row = await _row(engine, job_id)
    assert row.status == "failed" and "lease expired" in str(row.error)


async def test_cancel_ends_a_queued_job_and_flags_a_running_one(engine: AsyncEngine) -> None:
    queued = str(await _add(engine, run_at=NOW + 100))
    running = str(await _add(engine))
    (job,) = await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW)
    assert job.id == running
    async with engine.begin() as conn:
        assert await queue.request_cancel(conn, queued, now=NOW) == "cancelled"
        assert await queue.request_cancel(conn, running, now=NOW) == "running"
        assert await queue.request_cancel(conn, "0" * 32, now=NOW) == ""
    assert await queue.heartbeat(engine, running, job.epoch, lease_s=10, now=NOW + 1) is True
    await queue.mark_cancelled(engine, running, job.epoch, now=NOW + 2)
    assert (await _row(engine, running)).status == "cancelled"
    assert await queue.claim(engine, "w", ["k"], limit=5, lease_s=10, now=NOW + 200) == []


async def test_a_dedupe_key_admits_one_live_job(engine: AsyncEngine) -> None:
    first = await _add(engine, dedupe_key="probe:p1")
    assert first is not None
    assert await _add(engine, dedupe_key="probe:p1") is None
    (job,) = await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW)
    await queue.succeed(engine, first, job.epoch, now=NOW, release_dedupe=True)
    assert await _add(engine, dedupe_key="probe:p1") is not None  # released at the end
    kept = str(await _add(engine, dedupe_key="slot@1"))
    claimed = await queue.claim(engine, "w", ["k"], limit=5, lease_s=10, now=NOW)
    assert len(claimed) == 2
    epoch = next(job.epoch for job in claimed if job.id == kept)
    await queue.succeed(engine, kept, epoch, now=NOW, release_dedupe=False)
    assert await _add(engine, dedupe_key="slot@1") is None  # kept: one per slot, ever


async def test_prune_deletes_finished_jobs_past_their_expiry(engine: AsyncEngine) -> None:
    done = str(await _add(engine))
    waiting = str(await _add(engine, run_at=NOW + 10_000))
    (job,) = await queue.claim(engine, "w", ["k"], limit=1, lease_s=10, now=NOW)
    await queue.succeed(engine, done, job.epoch, now=NOW, expires_at=NOW + 100)
    assert await queue.prune(engine, now=NOW + 50, keep_finished_s=1_000) == 0
    assert await queue.prune(engine, now=NOW + 101, keep_finished_s=1_000) == 1
    assert (await _row(engine, waiting)).status == "queued"

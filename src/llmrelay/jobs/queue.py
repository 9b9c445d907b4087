"""The job queue's SQL: enqueue, claim under a lease, heartbeat, checkpoint, finish, retry,
cancel, repair expired leases, prune. Nothing else reads or writes the `jobs` table's state.

A claim moves the job to `running`, takes a lease until `lease_until` and moves `epoch`, the
fencing token: each later write about the job names the epoch it claimed, so a worker that lost
its lease (it stalled, another worker took the job over) changes nothing any more; the write
says so by touching no row (`LeaseLost`). On PostgreSQL the claim picks its rows with
`FOR UPDATE SKIP LOCKED`, so workers claiming at the same moment never wait for, nor take, each
other's rows; SQLite has one writer at a time, and the claim is one UPDATE statement.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, and_, bindparam, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from llmrelay.store.db import background_begin, background_connect
from llmrelay.store.models import new_id
from llmrelay.store.models_jobs import (
    CANCELLED,
    FAILED,
    FINISHED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Job,
)

jobs: Table = Job.__table__  # type: ignore[assignment]


class LeaseLost(Exception):
    """The job is no longer this worker's: its lease ran out and it was claimed again, it was
    cancelled, or it is gone. The worker stops working on it and writes nothing more."""


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """What a worker holds while it runs one claim of a job."""

    id: str
    kind: str
    epoch: int
    attempts: int
    max_attempts: int
    payload: dict[str, Any]
    payload_sealed: str | None
    checkpoint: dict[str, Any] | None
    tenant_id: str | None
    project_id: str | None
    key_id: str | None
    created_at: datetime


def utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def _insert(dialect: str) -> Any:
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(jobs)


async def enqueue(
    conn: AsyncConnection | AsyncSession,
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    now: float,
    job_id: str | None = None,
    run_at: float | None = None,
    dedupe_key: str | None = None,
    max_attempts: int = 5,
    tenant_id: str | None = None,
    project_id: str | None = None,
    key_id: str | None = None,
    payload_sealed: str | None = None,
    expires_at: float | None = None,
) -> str | None:
    """Add a job (in the caller's transaction); its id, or None when `dedupe_key` is held by
    another job already (that one stands for this one)."""
    values = {
        "id": job_id or new_id(),
        "kind": kind,
        "status": QUEUED,
        "tenant_id": tenant_id,
        "project_id": project_id,
        "key_id": key_id,
        "dedupe_key": dedupe_key,
        "payload": payload or {},
        "payload_sealed": payload_sealed,
        "attempts": 0,
        "max_attempts": max_attempts,
        "run_at": utc(run_at if run_at is not None else now),
        "epoch": 0,
        "cancel_requested": False,
        "expires_at": None if expires_at is None else utc(expires_at),
        "created_at": utc(now),
        "updated_at": utc(now),
    }
    bind = conn.bind if isinstance(conn, AsyncSession) else conn
    assert bind is not None
    statement = _insert(bind.dialect.name).values(**values)
    if dedupe_key is not None:
        statement = statement.on_conflict_do_nothing(index_elements=["dedupe_key"])
    result = await conn.execute(statement.returning(jobs.c.id))
    row = result.first()
    return None if row is None else str(row[0])


async def claim(
    engine: AsyncEngine,
    worker: str,
    kinds: Sequence[str],
    *,
    limit: int,
    lease_s: float,
    now: float,
) -> list[ClaimedJob]:
    """Claim up to `limit` due jobs of `kinds`, oldest due first."""
    if limit <= 0 or not kinds:
        return []
    if not await _any(engine, _due_probe(tuple(kinds)), now):
        return []  # an idle queue costs a read, never a write transaction
    due = select(jobs.c.id).where(_due(kinds, now)).order_by(jobs.c.run_at).limit(limit)
    if engine.dialect.name == "postgresql":
        # A CTE, not `id IN (subquery)`: PostgreSQL may run such a subquery more than once
        # in one UPDATE, and with SKIP LOCKED each run can pick other rows (more than
        # `limit` claimed). A CTE runs once.
        picked = due.with_for_update(skip_locked=True).cte("due")
        chosen: Any = jobs.c.id == picked.c.id
    else:
        chosen = jobs.c.id.in_(due.scalar_subquery())
    statement = (
        update(jobs)
        .where(chosen, jobs.c.status == QUEUED)
        .values(
            status=RUNNING,
            epoch=jobs.c.epoch + 1,
            attempts=jobs.c.attempts + 1,
            lease_owner=worker,
            lease_until=utc(now + lease_s),
            heartbeat_at=utc(now),
            started_at=func.coalesce(jobs.c.started_at, utc(now)),
            updated_at=utc(now),
        )
        .returning(
            jobs.c.id,
            jobs.c.kind,
            jobs.c.epoch,
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.payload,
            jobs.c.payload_sealed,
            jobs.c.checkpoint,
            jobs.c.tenant_id,
            jobs.c.project_id,
            jobs.c.key_id,
            jobs.c.created_at,
        )
    )
    async with background_begin(engine) as conn:
        rows = (await conn.execute(statement)).all()
    claimed = [ClaimedJob(*row) for row in rows]
    claimed.sort(key=lambda job: job.created_at)
    return claimed


async def any_due(engine: AsyncEngine, kinds: Sequence[str], now: float) -> bool:
    """Whether a job of `kinds` is queued and due at `now` (a plain read: no lock skipped)."""
    return bool(kinds) and await _any(engine, _due_probe(tuple(kinds)), now)


def _due(kinds: Sequence[str], now: float) -> Any:
    return and_(jobs.c.status == QUEUED, jobs.c.run_at <= utc(now), jobs.c.kind.in_(kinds))


@functools.lru_cache(maxsize=16)
def _due_probe(kinds: tuple[str, ...]) -> Any:
    """ "Is a job of `kinds` due at :now?", built once per set of kinds: the idle runner asks
    it every few seconds, and building a statement costs the event loop more than running
    it (bench/stalls.py)."""
    due = and_(jobs.c.status == QUEUED, jobs.c.run_at <= bindparam("now"), jobs.c.kind.in_(kinds))
    return select(jobs.c.id).where(due).limit(1)


#: "Has a running job's lease expired by :now?", asked at every housekeeping round.
_EXPIRED_PROBE = (
    select(jobs.c.id)
    .where(jobs.c.status == RUNNING, jobs.c.lease_until < bindparam("now"))
    .limit(1)
)


async def _any(engine: AsyncEngine, probe: Any, now: float) -> bool:
    """Whether a row matches `probe` (a prebuilt select with a :now parameter) at `now`: a
    plain read (on SQLite it takes no write lock, so the idle polls of every runner never
    queue behind, or hold up, the recorder's writes)."""
    async with background_connect(engine) as conn:
        found = await conn.execute(probe, {"now": utc(now)})
        return found.first() is not None


def _fenced(job_id: str, epoch: int) -> Any:
    return and_(jobs.c.id == job_id, jobs.c.epoch == epoch, jobs.c.status == RUNNING)


async def heartbeat(
    engine: AsyncEngine, job_id: str, epoch: int, *, lease_s: float, now: float
) -> bool:
    """Extend the lease; whether a cancel was asked for. Raises LeaseLost."""
    async with background_begin(engine) as conn:
        row = (
            await conn.execute(
                update(jobs)
                .where(_fenced(job_id, epoch))
                .values(lease_until=utc(now + lease_s), heartbeat_at=utc(now))
                .returning(jobs.c.cancel_requested)
            )
        ).first()
    if row is None:
        raise LeaseLost(job_id)
    return bool(row[0])


async def save_checkpoint(
    engine: AsyncEngine, job_id: str, epoch: int, checkpoint: dict[str, Any], *, now: float
) -> None:
    """Record progress for the next attempt. Raises LeaseLost."""
    await _fenced_update(engine, job_id, epoch, checkpoint=checkpoint, updated_at=utc(now))


async def succeed(
    engine: AsyncEngine,
    job_id: str,
    epoch: int,
    *,
    now: float,
    result: dict[str, Any] | None = None,
    result_sealed: str | None = None,
    release_dedupe: bool = True,
    expires_at: float | None = None,
) -> None:
    """Finish a job with its result. Raises LeaseLost."""
    values: dict[str, Any] = {
        "status": SUCCEEDED,
        "result": result,
        "result_sealed": result_sealed,
        "error": None,
        **_ended(now),
    }
    if release_dedupe:
        values["dedupe_key"] = None
    if expires_at is not None:
        values["expires_at"] = utc(expires_at)
    await _fenced_update(engine, job_id, epoch, **values)


async def fail(
    engine: AsyncEngine,
    job_id: str,
    epoch: int,
    error: str,
    *,
    now: float,
    retry_at: float | None,
    release_dedupe: bool = True,
    result: dict[str, Any] | None = None,
    expires_at: float | None = None,
) -> str:
    """An attempt failed: queued again at `retry_at` while attempts are left (and a retry is
    wanted), else failed for good. The state it is left in. Raises LeaseLost."""
    async with background_begin(engine) as conn:
        row = (
            await conn.execute(
                select(jobs.c.attempts, jobs.c.max_attempts).where(_fenced(job_id, epoch))
            )
        ).first()
        if row is None:
            raise LeaseLost(job_id)
        if retry_at is not None and row.attempts < row.max_attempts:
            values: dict[str, Any] = {
                "status": QUEUED,
                "run_at": utc(retry_at),
                "error": error,
                "lease_owner": None,
                "lease_until": None,
                "updated_at": utc(now),
            }
        else:
            values = {"status": FAILED, "error": error, "result": result, **_ended(now)}
            if release_dedupe:
                values["dedupe_key"] = None
            if expires_at is not None:
                values["expires_at"] = utc(expires_at)
        done = await conn.execute(update(jobs).where(_fenced(job_id, epoch)).values(**values))
        if done.rowcount != 1:
            raise LeaseLost(job_id)
    return str(values["status"])


async def reschedule(
    engine: AsyncEngine, job_id: str, epoch: int, *, run_at: float, now: float
) -> None:
    """Queue the job again at `run_at` without spending an attempt (a probe's next round,
    a limit that will reset). Raises LeaseLost."""
    await _fenced_update(
        engine,
        job_id,
        epoch,
        status=QUEUED,
        run_at=utc(run_at),
        attempts=jobs.c.attempts - 1,
        lease_owner=None,
        lease_until=None,
        updated_at=utc(now),
    )


async def mark_cancelled(
    engine: AsyncEngine, job_id: str, epoch: int, *, now: float, release_dedupe: bool = True
) -> None:
    """A running job stopped because a cancel was asked for. Raises LeaseLost."""
    values: dict[str, Any] = {"status": CANCELLED, **_ended(now)}
    if release_dedupe:
        values["dedupe_key"] = None
    await _fenced_update(engine, job_id, epoch, **values)


async def request_cancel(conn: AsyncConnection | AsyncSession, job_id: str, *, now: float) -> str:
    """Cancel a job: a queued one at once, a running one at its worker's next heartbeat.
    The job's state afterwards ("" when there is no such job)."""
    await conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status == QUEUED)
        .values(status=CANCELLED, dedupe_key=None, **_ended(now))
    )
    await conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status == RUNNING)
        .values(cancel_requested=True, updated_at=utc(now))
    )
    state = (await conn.execute(select(jobs.c.status).where(jobs.c.id == job_id))).scalar()
    return str(state or "")


async def cancel_requested(engine: AsyncEngine, job_id: str, epoch: int) -> bool:
    """Whether a cancel was asked for the job this worker holds (False once it is not this
    worker's any more: nothing of it is this worker's to cancel)."""
    async with background_connect(engine) as conn:
        found = (
            await conn.execute(select(jobs.c.cancel_requested).where(_fenced(job_id, epoch)))
        ).scalar()
    return bool(found)


async def fence(conn: AsyncConnection, job_id: str, epoch: int, *, now: float) -> None:
    """Inside the caller's transaction: the job is still this worker's (its row now locked
    until the commit), so what the transaction also writes about the job's work (a webhook
    delivery's attempt) is written by its one holder. Raises LeaseLost."""
    done = await conn.execute(
        update(jobs).where(_fenced(job_id, epoch)).values(updated_at=utc(now))
    )
    if done.rowcount != 1:
        raise LeaseLost(job_id)


async def repair_expired(engine: AsyncEngine, *, now: float) -> tuple[int, int]:
    """Jobs whose lease ran out (their worker died or stalled): queued again while attempts
    are left, else failed. The counts (requeued, failed). The next claim moves the epoch, so
    the old worker, should it wake up, is fenced out."""
    expired = and_(jobs.c.status == RUNNING, jobs.c.lease_until < utc(now))
    if not await _any(engine, _EXPIRED_PROBE, now):
        return 0, 0
    async with background_begin(engine) as conn:
        requeued = await conn.execute(
            update(jobs)
            .where(expired, jobs.c.attempts < jobs.c.max_attempts)
            .values(status=QUEUED, run_at=utc(now), lease_owner=None, lease_until=None)
        )
        failed = await conn.execute(
            update(jobs)
            .where(expired, jobs.c.attempts >= jobs.c.max_attempts)
            .values(
                status=FAILED,
                error="the worker running it stopped (lease expired) and no attempts are left",
                dedupe_key=None,
                **_ended(now),
            )
        )
    return requeued.rowcount or 0, failed.rowcount or 0


async def prune(engine: AsyncEngine, *, now: float, keep_finished_s: float) -> int:
    """Delete finished jobs past their expiry, or finished longer than `keep_finished_s` ago
    when they have none."""
    cutoff = utc(now - keep_finished_s)
    async with background_begin(engine) as conn:
        result = await conn.execute(
            delete(jobs).where(
                jobs.c.status.in_(FINISHED),
                or_(
                    jobs.c.expires_at < utc(now),
                    and_(jobs.c.expires_at.is_(None), jobs.c.finished_at < cutoff),
                ),
            )
        )
    return result.rowcount or 0


async def holder(conn: AsyncConnection | AsyncSession, dedupe_key: str) -> str | None:
    """The id of the live job that holds `dedupe_key` (None: no job holds it)."""
    found = await conn.execute(select(jobs.c.id).where(jobs.c.dedupe_key == dedupe_key))
    value = found.scalar()
    return None if value is None else str(value)


async def hasten(conn: AsyncConnection | AsyncSession, dedupe_key: str, *, now: float) -> bool:
    """Bring the queued job holding `dedupe_key` forward to now when it was due later (a
    probe waiting for its next round when something says to look again at once); whether
    one was."""
    result = await conn.execute(
        update(jobs)
        .where(jobs.c.dedupe_key == dedupe_key, jobs.c.status == QUEUED, jobs.c.run_at > utc(now))
        .values(run_at=utc(now), updated_at=utc(now))
    )
    return bool(getattr(result, "rowcount", 0))


async def _fenced_update(engine: AsyncEngine, job_id: str, epoch: int, **values: Any) -> None:
    async with background_begin(engine) as conn:
        done = await conn.execute(update(jobs).where(_fenced(job_id, epoch)).values(**values))
    if done.rowcount != 1:
        raise LeaseLost(job_id)


def _ended(now: float) -> dict[str, Any]:
    return {
        "finished_at": utc(now),
        "updated_at": utc(now),
        "lease_owner": None,
        "lease_until": None,
        "cancel_requested": False,
    }

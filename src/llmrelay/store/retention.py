"""Deleting request records (and their attempt rows and guardrail hits) older than the
retention period.

On PostgreSQL the records are partitioned by month (store/partitions.py): every monthly
partition wholly older than the cutoff is dropped first (DROP TABLE: instantaneous, no dead
rows to vacuum), then what is left older than the cutoff, in the month that straddles it
(and the default partition), is deleted in batches like on SQLite. Rows are deleted in small
batches so a large backlog never holds a long lock or a huge transaction; attempt rows are
few and always deleted in batches.

It runs as a periodic job (jobs/retention.py: one replica each round, every
LLMRELAY_RETENTION_INTERVAL_S); a session advisory lock taken without waiting keeps a second
pruner on PostgreSQL out all the same (a round that outlasts its interval).

Rollups stay: the hourly usage rollups of pruned hours are kept (they are small), so the
usage API's totals and time series go back beyond the record retention, while the request
list starts at the retention horizon. Budgets do not read old months. A pruned hour's rollup
is only recomputed, from no records, if the hour is marked dirty again, which takes a record
older than the retention period arriving late (a spool replayed after that long); nothing
else writes into the past.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmrelay.store import partitions
from llmrelay.store.models import RequestAttempt, RequestRecord
from llmrelay.store.models_guardrails import GuardrailHit

BATCH_ROWS = 5_000
_PG_RETENTION_LOCK = 7_211_960_124


@dataclass(frozen=True, slots=True)
class Pruned:
    #: Records deleted row by row (attempt rows not counted).
    deleted: int = 0
    #: Monthly partitions dropped whole, oldest first (PostgreSQL).
    dropped: tuple[str, ...] = ()


async def prune(engine: AsyncEngine, retention_days: float, now: float | None = None) -> Pruned:
    """Remove records created before now - retention_days: whole partitions, then batches
    (each its own short transaction). Another replica pruning: nothing done."""
    cutoff = datetime.fromtimestamp((now or time.time()) - retention_days * 86_400, UTC)
    postgres = engine.dialect.name == "postgresql"
    deleted = 0
    async with engine.connect() as lock_holder:
        if postgres and not await try_lock(lock_holder, _PG_RETENTION_LOCK):
            return Pruned()
        try:
            # A failed DROP raises before the batches: they must never delete a month row
            # by row that its DROP will remove at once in a later round.
            dropped = tuple(await partitions.drop_before(engine, cutoff))
            deleted = await delete_before(
                engine,
                RequestRecord,
                RequestRecord.created_at,
                RequestRecord.id,
                cutoff,
                BATCH_ROWS,
            )
            await delete_before(
                engine,
                RequestAttempt,
                RequestAttempt.created_at,
                RequestAttempt.id,
                cutoff,
                BATCH_ROWS,
            )
            await delete_before(
                engine, GuardrailHit, GuardrailHit.created_at, GuardrailHit.id, cutoff, BATCH_ROWS
            )
        finally:
            if postgres:
                await unlock(lock_holder, _PG_RETENTION_LOCK)
    return Pruned(deleted, dropped)


async def delete_before(
    engine: AsyncEngine, table: Any, column: Any, key: Any, cutoff: datetime, batch_rows: int
) -> int:
    """Delete `table`'s rows whose `column` is before `cutoff`, `batch_rows` at a time, each
    batch its own short transaction; the number deleted. (Payload retention uses it too.)"""
    deleted = 0
    while True:
        async with engine.begin() as conn:
            batch = select(key).where(column < cutoff).limit(batch_rows)
            # `column < cutoff` again: PostgreSQL then looks for the ids only in the
            # partitions that can hold them.
            result = await conn.execute(delete(table).where(column < cutoff, key.in_(batch)))
        count = result.rowcount or 0
        deleted += count
        if count < batch_rows:
            return deleted
        await asyncio.sleep(0)  # let the request path run between batches


async def try_lock(conn: AsyncConnection, lock_id: int) -> bool:
    """A PostgreSQL session advisory lock, taken without waiting."""
    result = await conn.execute(text(f"SELECT pg_try_advisory_lock({lock_id})"))
    return bool(result.scalar())


async def unlock(conn: AsyncConnection, lock_id: int) -> None:
    await conn.execute(text(f"SELECT pg_advisory_unlock({lock_id})"))

"""Deleting request records (and their attempt rows) older than the retention period, in
small batches so a large backlog never holds a long lock or a huge transaction.

One replica prunes at a time on PostgreSQL (a session advisory lock taken without waiting;
the others skip that round); SQLite has one process. Budgets do not read old months, and the
usage API's history simply starts at the retention horizon.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import structlog
from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmrelay.store.models import RequestAttempt, RequestRecord

log = structlog.get_logger(__name__)

BATCH_ROWS = 5_000
_PG_RETENTION_LOCK = 7_211_960_124


async def prune(engine: AsyncEngine, retention_days: float, now: float | None = None) -> int:
    """Delete records created before now - retention_days; the number deleted (attempt
    rows not counted). Each batch is its own short transaction."""
    cutoff = datetime.fromtimestamp((now or time.time()) - retention_days * 86_400, UTC)
    postgres = engine.dialect.name == "postgresql"
    deleted = 0
    async with engine.connect() as lock_holder:
        if postgres and not await _try_lock(lock_holder):
            return 0
        try:
            for table, column, key in (
                (RequestRecord, RequestRecord.created_at, RequestRecord.id),
                (RequestAttempt, RequestAttempt.created_at, RequestAttempt.id),
            ):
                while True:
                    async with engine.begin() as conn:
                        batch = select(key).where(column < cutoff).limit(BATCH_ROWS)
                        result = await conn.execute(delete(table).where(key.in_(batch)))
                    count = result.rowcount or 0
                    if table is RequestRecord:
                        deleted += count
                    if count < BATCH_ROWS:
                        break
                    await asyncio.sleep(0)  # let the request path run between batches
        finally:
            if postgres:
                await lock_holder.execute(text(f"SELECT pg_advisory_unlock({_PG_RETENTION_LOCK})"))
    return deleted


async def _try_lock(conn: AsyncConnection) -> bool:
    result = await conn.execute(text(f"SELECT pg_try_advisory_lock({_PG_RETENTION_LOCK})"))
    return bool(result.scalar())


async def run(engine: AsyncEngine, retention_days: float, interval_s: float) -> None:
    """Prune now, then every `interval_s`, until cancelled; a failure is logged and the
    next round tries again."""
    while True:
        try:
            deleted = await prune(engine, retention_days)
            if deleted:
                log.info("records_pruned", deleted=deleted, retention_days=retention_days)
        except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the task
            log.warning("records_prune_failed", error=str(exc))
        await asyncio.sleep(interval_s)

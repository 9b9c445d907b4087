"""Deleting captured payloads (request_payloads) past their retention, in small batches.

Payloads hold whole bodies, so they may be kept for less time than the records that
describe their requests: LLMRELAY_PAYLOAD_RETENTION_DAYS. They are never kept longer: the
cutoff is the shorter of that and the records' retention (LLMRELAY_RECORD_RETENTION_DAYS),
and a payload's `created_at` is its record's, so the payloads of the records retention
removes are the ones this removes (at most one round later). Neither set: payloads stay as
long as their records do, for ever.

Batches of BATCH_ROWS rows, each its own short transaction (a payload row can hold a couple
of MiB, so fewer rows per batch than the records'); one replica prunes at a time on
PostgreSQL (a session advisory lock taken without waiting; the others skip that round).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.models import RequestPayload
from llmrelay.store.retention import delete_before, try_lock, unlock

log = structlog.get_logger(__name__)

BATCH_ROWS = 500
_PG_PAYLOAD_RETENTION_LOCK = 7_211_960_126


def retention_days(payload_days: float | None, record_days: float | None) -> float | None:
    """How long payloads are kept: the shorter of the two periods that are set; None (no
    pruning) when neither is."""
    periods = [days for days in (payload_days, record_days) if days is not None]
    return min(periods) if periods else None


async def prune(engine: AsyncEngine, days: float, now: float | None = None) -> int:
    """Delete payloads created before now - days; the number deleted. Another replica
    pruning: 0, nothing done."""
    cutoff = datetime.fromtimestamp((now or time.time()) - days * 86_400, UTC)
    postgres = engine.dialect.name == "postgresql"
    async with engine.connect() as lock_holder:
        if postgres and not await try_lock(lock_holder, _PG_PAYLOAD_RETENTION_LOCK):
            return 0
        try:
            return await delete_before(
                engine,
                RequestPayload,
                RequestPayload.created_at,
                RequestPayload.id,
                cutoff,
                BATCH_ROWS,
            )
        finally:
            if postgres:
                await unlock(lock_holder, _PG_PAYLOAD_RETENTION_LOCK)


async def run(engine: AsyncEngine, days: float, interval_s: float) -> None:
    """Prune now, then every `interval_s`, until cancelled; a failure is logged and the
    next round tries again."""
    while True:
        try:
            deleted = await prune(engine, days)
            if deleted:
                log.info("payloads_pruned", deleted=deleted, retention_days=days)
        except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the task
            log.warning("payloads_prune_failed", error=str(exc))
        await asyncio.sleep(interval_s)

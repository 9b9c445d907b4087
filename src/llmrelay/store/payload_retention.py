"""Deleting captured payloads (request_payloads) past their retention, in small batches.

Payloads hold whole bodies, so they may be kept for less time than the records that
describe their requests: LLMRELAY_PAYLOAD_RETENTION_DAYS. They are never kept longer: the
cutoff is the shorter of that and the records' retention (LLMRELAY_RECORD_RETENTION_DAYS),
and a payload's `created_at` is its record's, so the payloads of the records retention
removes are the ones this removes (at most one round later). Neither set: payloads stay as
long as their records do, for ever.

Batches of BATCH_ROWS rows, each its own short transaction (a payload row can hold a couple
of MiB, so fewer rows per batch than the records'). It runs as a periodic job
(jobs/retention.py: one replica each round); on PostgreSQL a session advisory lock taken without
waiting keeps a second pruner out all the same.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.models import RequestPayload
from llmrelay.store.retention import delete_before, try_lock, unlock

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

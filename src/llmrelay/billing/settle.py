"""One request's settle in the caller's transaction (the per-request path: requests that
reserved with their own transaction, and reconciliation), and the auto top-up a settle that
leaves the balance under the wallet's threshold queues (one live job per wallet)."""

from __future__ import annotations

import time
from typing import Final

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.billing import ledger
from llmrelay.jobs import queue as jobs
from llmrelay.store.models_billing import Wallet

log = structlog.get_logger(__name__)

#: Pauses between retries while the database refuses settles (the last one repeats): short
#: enough that settles kept in memory through an outage land within seconds of its end,
#: before the reconciliation job has long looked for them; a try every 5 s against a
#: database that is away costs nothing worth saving.
SETTLE_RETRY_PAUSES_S: Final[tuple[float, ...]] = (0.2, 0.5, 1.0, 2.0, 5.0)

#: The job kind that tops a wallet up from its saved payment method (billing/topups.py).
AUTO_TOPUP_KIND: Final = "billing_auto_topup"


def auto_topup_dedupe(tenant_id: str) -> str:
    return f"auto_topup:{tenant_id}"


async def settle_one(
    conn: AsyncConnection, request_id: str, tenant_id: str | None, charge: int | None
) -> str:
    """Settle one request in the caller's transaction; what happened (charged, released,
    metering_failed, none: nothing was held)."""
    moved = await ledger.settle(conn, request_id, charge)
    if moved is None and charge is not None:
        # Held no longer: the reconciliation job gave up waiting for this request (a stream
        # that ran past its horizon) and marked it metering_failed. Its cost is known now.
        moved = await ledger.reconcile(conn, request_id, charge, actor="late settle")
    if moved is None:
        return "none"
    if charge is None:
        return ledger.METERING_FAILED
    if tenant_id is not None and moved.applied:
        await queue_auto_topup(conn, tenant_id, moved.balance_micros)
    return "charged" if charge else "released"


async def queue_auto_topup(conn: AsyncConnection, tenant_id: str, balance_micros: int) -> bool:
    """Queue the wallet's auto top-up job when `balance_micros` is under its threshold."""
    row = (
        await conn.execute(
            select(Wallet.auto_topup_enabled, Wallet.auto_topup_threshold_micros).where(
                Wallet.tenant_id == tenant_id
            )
        )
    ).first()
    if row is None or not row[0] or row[1] is None or balance_micros >= int(row[1]):
        return False
    queued = await jobs.enqueue(
        conn,
        AUTO_TOPUP_KIND,
        {"tenant_id": tenant_id},
        now=time.time(),
        dedupe_key=auto_topup_dedupe(tenant_id),
        tenant_id=tenant_id,
    )
    if queued is not None:
        log.info("billing_auto_topup_queued", tenant_id=tenant_id, balance_micros=balance_micros)
    return queued is not None

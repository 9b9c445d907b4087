"""Chargebacks of top-ups: Stripe's `charge.dispute.created` and `charge.dispute.closed`
events, handled from what Stripe's API says about the dispute now (never the event's copy).

    open (needs_response, under_review, warning_*)   hold the disputed amount: available ->
                                                     reserved, once per dispute
    won, warning_closed                              release the hold, once
    lost                                             the held money leaves the wallet, once

The state is decided by the dispute's status when read back, not by the event's type, so
events that arrive late, twice or out of order (a `closed` before its `created`) end the same
way: a dispute first seen closed is held and closed in one transaction. Every movement is a
ledger entry with its own idempotency key (`dispute_hold:<id>`, `dispute_close:<id>`) in the
same transaction as the dispute's row and the order's `disputed_micros`.

The held amount is the disputed amount in micro-USD, at most the order's amount; a dispute in
another currency than its order is recorded as a mismatch and moves nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import structlog
from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.billing import ledger, orders
from llmrelay.billing.orders import Order
from llmrelay.billing.stripe_config import MICROS_PER_CENT
from llmrelay.store.models_billing import Dispute
from llmrelay.store.types import utcnow

if TYPE_CHECKING:
    from llmrelay.billing.payments import Payments

log = structlog.get_logger(__name__)

disputes: Table = Dispute.__table__  # type: ignore[assignment]

#: The events handled here (the others about disputes say nothing that moves money).
EVENTS: Final = frozenset({"charge.dispute.created", "charge.dispute.closed"})
OPEN: Final = "open"
WON: Final = "won"
LOST: Final = "lost"
#: Stripe's statuses that end a dispute in the tenant's favour (an inquiry that closed without
#: becoming a chargeback is `warning_closed`).
_WON_STATUSES: Final = frozenset({"won", "warning_closed", "prevented"})


def _id(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


async def handle(payments: Payments, obj: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(outcome, detail, order id) for a dispute event whose object is `obj`: `held`,
    `won`, `lost`, `duplicate` (nothing new), `ignored` (not a top-up of this gateway's) or
    `mismatch`. Raises PaymentProviderError when Stripe could not be asked (503: Stripe
    delivers the event again)."""
    dispute_id = _id(obj.get("id"))
    if dispute_id is None:
        return "ignored", "the event names no dispute", None
    dispute = await payments.api().retrieve_dispute(dispute_id)
    intent = _id(dispute.get("payment_intent"))
    async with payments.engine.connect() as conn:
        order = None if intent is None else await orders.by_stripe_id(conn, intent_id=intent)
    if order is None:
        return "ignored", "not a payment of a top-up order of this gateway", None
    if str(dispute.get("currency") or "").lower() != order.currency:
        detail = f"dispute currency {dispute.get('currency')!r}, the order's is {order.currency!r}"
        log.error("stripe_dispute_mismatch", dispute_id=dispute_id, order_id=order.id)
        return "mismatch", detail, order.id
    status = str(dispute.get("status") or "")
    async with payments.engine.begin() as conn:
        outcome = await _apply(conn, order, dispute_id, dispute, status)
    log.warning(
        "stripe_dispute",
        dispute_id=dispute_id,
        order_id=order.id,
        tenant_id=order.tenant_id,
        status=status,
        outcome=outcome,
    )
    return outcome, f"dispute {dispute_id}: {status}", order.id


async def _apply(
    conn: AsyncConnection, order: Order, dispute_id: str, dispute: dict[str, Any], status: str
) -> str:
    amount = dispute.get("amount")
    disputed = amount * MICROS_PER_CENT if isinstance(amount, int) and amount > 0 else 0
    held = min(disputed, order.amount_micros)
    outcome = "duplicate"
    if await _open(conn, order, dispute_id, dispute, held, status):
        await ledger.ensure_wallet(conn, order.tenant_id, prepaid=False)
        await ledger.hold_dispute(conn, order.tenant_id, dispute_id, held, order_id=order.id)
        await _count(conn, order.id, held)
        outcome = "held"
    if status == "lost" or status in _WON_STATUSES:
        lost = status == "lost"
        closed = await conn.execute(
            update(disputes)
            .where(disputes.c.id == dispute_id, disputes.c.status == OPEN)
            .values(status=LOST if lost else WON, stripe_status=status, closed_at=utcnow())
            .returning(disputes.c.amount_micros)
        )
        row = closed.first()
        if row is not None:
            kept = int(row[0])
            await ledger.close_dispute(
                conn, order.tenant_id, dispute_id, kept, lost=lost, order_id=order.id
            )
            if not lost:
                await _count(conn, order.id, -kept)
            outcome = LOST if lost else WON
    elif outcome == "duplicate":
        await conn.execute(
            update(disputes).where(disputes.c.id == dispute_id).values(stripe_status=status)
        )
    return outcome


async def _open(
    conn: AsyncConnection,
    order: Order,
    dispute_id: str,
    dispute: dict[str, Any],
    held: int,
    status: str,
) -> bool:
    """Record the dispute; False when it was recorded before (its hold was made then)."""
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(disputes)
    reason = dispute.get("reason")
    added = await conn.execute(
        insert.values(
            id=dispute_id,
            tenant_id=order.tenant_id,
            order_id=order.id,
            charge_id=_id(dispute.get("charge")),
            amount_micros=held,
            reason=reason[:64] if isinstance(reason, str) else None,
            status=OPEN,
            stripe_status=status[:32],
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(disputes.c.id)
    )
    return added.first() is not None


async def _count(conn: AsyncConnection, order_id: str, delta: int) -> None:
    """The order's disputed amount, which a refund to the card may not take again."""
    await conn.execute(
        update(orders.orders)
        .where(orders.orders.c.id == order_id)
        .values(disputed_micros=orders.orders.c.disputed_micros + delta, updated_at=utcnow())
    )


async def of_tenant(conn: AsyncConnection, tenant_id: str) -> list[Any]:
    """The tenant's disputes, newest first."""
    found = await conn.execute(
        select(disputes)
        .where(disputes.c.tenant_id == tenant_id)
        .order_by(disputes.c.created_at.desc(), disputes.c.id)
    )
    return list(found)

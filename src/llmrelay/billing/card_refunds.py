"""Refunds to the card: part or all of a paid top-up sent back through Stripe's refund API,
and taken from the wallet through the ledger exactly once.

    1. one transaction: the refund's row (`pending`), the order's `refunded_micros` raised by
       one conditional UPDATE (refunded + disputed + this <= the order's amount, so two
       refunds racing for the last dollars cannot both pass), and the wallet debited
       (`card_refund:<row id>`, never below zero);
    2. Stripe's POST /v1/refunds with Idempotency-Key `refund:<row id>`;
    3. one transaction: `succeeded` with Stripe's refund id; or, when Stripe refused it for
       good, `failed` and the debit given back (`card_refund_reversal:<row id>`) and the
       order's count lowered.

The caller's `refund_id` names the refund: the same id again with the same order and amount
moves nothing; while the refund is still `pending` (Stripe could not be reached, or answered
5xx), it asks Stripe again with the same Idempotency-Key, so Stripe answers the refund it may
have made already and never makes a second one. The same id with another amount or order is
a conflict. The wallet is debited before Stripe is asked: money never leaves for the card
without its ledger entry, and a refusal puts it back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import structlog
from sqlalchemy import Table, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.billing import ledger, orders
from llmrelay.billing.errors import BillingError, InsufficientBalance, PaymentProviderError, usd
from llmrelay.billing.stripe_config import MICROS_PER_CENT
from llmrelay.store.models import new_id
from llmrelay.store.models_billing import CardRefund
from llmrelay.store.types import utcnow

if TYPE_CHECKING:
    from llmrelay.billing.payments import Payments

log = structlog.get_logger(__name__)

card_refunds: Table = CardRefund.__table__  # type: ignore[assignment]

PENDING: Final = "pending"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"


class InvalidRefund(BillingError):
    """The refund cannot be made as asked (amount, order state, what is left); `field` names
    the input at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnknownOrder(BillingError):
    """No such order of the tenant."""


class RefundIdReused(BillingError):
    """The refund id was used for another order or amount."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The refund's row as it stands, and whether this call debited the wallet."""

    row: Any
    applied: bool
    balance_micros: int


async def refund_to_card(
    payments: Payments,
    tenant_id: str,
    order_id: str,
    amount_micros: int,
    refund_id: str,
    *,
    reason: str | None,
    actor: str | None,
) -> Outcome:
    """Refund `amount_micros` of the order's payment to its card (see the module). Raises
    InvalidRefund, UnknownOrder, RefundIdReused, PaymentsNotConfigured, and
    PaymentProviderError (retryable: the refund stays pending, ask again with the same id;
    not retryable: the debit was given back)."""
    payments.api()  # PaymentsNotConfigured before anything is written
    if amount_micros <= 0 or amount_micros % MICROS_PER_CENT:
        raise InvalidRefund("amount: a whole number of cents, more than zero", "amount_micros")
    try:
        order, row, applied = await _row_for(
            payments, tenant_id, order_id, amount_micros, refund_id, reason, actor
        )
    except IntegrityError:
        # The same refund id, started at the same moment by another call: its row won (this
        # transaction, its debit included, was rolled back); that one is read now.
        order, row, applied = await _row_for(
            payments, tenant_id, order_id, amount_micros, refund_id, reason, actor
        )
    if row.order_id != order_id or row.amount_micros != amount_micros:
        raise RefundIdReused(
            f"the refund id {refund_id!r} was used for {usd(row.amount_micros)} of order "
            f"{row.order_id!r}: use a new id"
        )
    if row.status == PENDING:
        row = await _ask_stripe(payments, row, order.stripe_payment_intent_id or "")
    async with payments.engine.connect() as conn:
        balance, _reserved = await ledger.balances(conn, tenant_id)
    return Outcome(row, applied, balance)


async def _row_for(
    payments: Payments,
    tenant_id: str,
    order_id: str,
    amount: int,
    refund_id: str,
    reason: str | None,
    actor: str | None,
) -> tuple[orders.Order, Any, bool]:
    """The order, the refund's row (made, with the debit, when the id is new) and whether
    this call made it."""
    async with payments.engine.begin() as conn:
        order = await orders.get(conn, order_id)
        if order is None or order.tenant_id != tenant_id:
            raise UnknownOrder(f"no order {order_id!r}")
        row = await _by_refund_id(conn, tenant_id, refund_id)
        if row is not None:
            return order, row, False
        return order, await _start(conn, order, amount, refund_id, reason, actor), True


async def _by_refund_id(conn: AsyncConnection, tenant_id: str, refund_id: str) -> Any:
    return (
        await conn.execute(
            select(card_refunds).where(
                card_refunds.c.tenant_id == tenant_id, card_refunds.c.refund_id == refund_id
            )
        )
    ).first()


async def _start(
    conn: AsyncConnection,
    order: orders.Order,
    amount: int,
    refund_id: str,
    reason: str | None,
    actor: str | None,
) -> Any:
    """Step 1: the row, the order's count and the debit, in the caller's transaction."""
    if order.status != orders.PAID or order.stripe_payment_intent_id is None:
        raise InvalidRefund(f"the order is {order.status}: only a paid top-up is refunded")
    taken = await conn.execute(
        update(orders.orders)
        .where(
            orders.orders.c.id == order.id,
            orders.orders.c.status == orders.PAID,
            orders.orders.c.refunded_micros + orders.orders.c.disputed_micros + amount
            <= orders.orders.c.amount_micros,
        )
        .values(refunded_micros=orders.orders.c.refunded_micros + amount, updated_at=utcnow())
    )
    if not taken.rowcount:
        left = await _left(conn, order.id)
        raise InvalidRefund(
            f"amount: the payment has {usd(left)} left to refund (what was refunded and "
            "disputed of it is not refunded again)",
            "amount_micros",
        )
    row_id = new_id()
    note = f"refund {refund_id} to the card" + (f": {reason}" if reason else "")
    try:
        await ledger.debit_card_refund(
            conn, order.tenant_id, row_id, amount, order_id=order.id, actor=actor, note=note
        )
    except InsufficientBalance as short:
        raise InvalidRefund(
            f"amount: the wallet's available balance ({usd(short.available)}) cannot cover "
            "the refund: what was spent is not refunded",
            "amount_micros",
        ) from None
    now = utcnow()
    await conn.execute(
        card_refunds.insert().values(
            id=row_id,
            tenant_id=order.tenant_id,
            refund_id=refund_id,
            order_id=order.id,
            amount_micros=amount,
            reason=reason,
            status=PENDING,
            created_by=actor,
            created_at=now,
            updated_at=now,
        )
    )
    return (await conn.execute(select(card_refunds).where(card_refunds.c.id == row_id))).one()


async def _left(conn: AsyncConnection, order_id: str) -> int:
    row = (
        await conn.execute(
            select(
                orders.orders.c.amount_micros,
                orders.orders.c.refunded_micros,
                orders.orders.c.disputed_micros,
            ).where(orders.orders.c.id == order_id)
        )
    ).one()
    return max(0, int(row[0]) - int(row[1]) - int(row[2]))


async def _ask_stripe(payments: Payments, row: Any, payment_intent: str) -> Any:
    """Steps 2 and 3."""
    metadata = {"order_id": row.order_id, "tenant_id": row.tenant_id, "refund_id": row.refund_id}
    try:
        refund = await payments.api().create_refund(
            row.id, payment_intent, row.amount_micros, metadata
        )
    except PaymentProviderError as error:
        if not error.retryable:
            async with payments.engine.begin() as conn:
                await _reverse(conn, row, str(error))
            log.warning("card_refund_refused", card_refund_id=row.id, error=str(error))
        raise
    status = refund.get("status")
    async with payments.engine.begin() as conn:
        if status in ("failed", "canceled"):
            failure = refund.get("failure_reason") or f"the refund is {status}"
            await _reverse(conn, row, f"Stripe: {failure}")
        else:
            await conn.execute(
                update(card_refunds)
                .where(card_refunds.c.id == row.id, card_refunds.c.status == PENDING)
                .values(status=SUCCEEDED, stripe_refund_id=refund.get("id"), updated_at=utcnow())
            )
        found = (await conn.execute(select(card_refunds).where(card_refunds.c.id == row.id))).one()
    log.info("card_refund", card_refund_id=row.id, order_id=row.order_id, status=found.status)
    return found


async def _reverse(conn: AsyncConnection, row: Any, failure: str) -> None:
    """A refund Stripe will not make: failed, the debit given back, the order's count
    lowered; once (the conditional UPDATE decides)."""
    moved = await conn.execute(
        update(card_refunds)
        .where(card_refunds.c.id == row.id, card_refunds.c.status == PENDING)
        .values(status=FAILED, failure=failure[:2000], updated_at=utcnow())
    )
    if not moved.rowcount:
        return
    await ledger.reverse_card_refund(
        conn, row.tenant_id, row.id, row.amount_micros, order_id=row.order_id
    )
    await conn.execute(
        update(orders.orders)
        .where(orders.orders.c.id == row.order_id)
        .values(
            refunded_micros=orders.orders.c.refunded_micros - row.amount_micros,
            updated_at=utcnow(),
        )
    )


async def resume_pending(payments: Payments, after_s: float, batch: int = 500) -> Counter[str]:
    """For the reconciliation job: refunds still `pending` `after_s` after their last change
    (Stripe could not be reached and nobody asked again) are asked of Stripe again, with the
    same Idempotency-Key: made once, or refused and given back. Counts by outcome."""
    counts: Counter[str] = Counter()
    if payments.stripe is None:
        return counts
    before = utcnow() - timedelta(seconds=after_s)
    async with payments.engine.connect() as conn:
        pending = (
            await conn.execute(
                select(card_refunds)
                .where(card_refunds.c.status == PENDING, card_refunds.c.updated_at <= before)
                .order_by(card_refunds.c.updated_at)
                .limit(batch)
            )
        ).all()
    for row in pending:
        async with payments.engine.connect() as conn:
            order = await orders.get(conn, row.order_id)
        intent = None if order is None else order.stripe_payment_intent_id
        try:
            done = await _ask_stripe(payments, row, intent or "")
        except PaymentProviderError as error:
            counts[FAILED if not error.retryable else "unreachable"] += 1
            continue
        counts[done.status] += 1
    return counts


async def of_order(conn: AsyncConnection, order_id: str) -> list[Any]:
    found = await conn.execute(
        select(card_refunds)
        .where(card_refunds.c.order_id == order_id)
        .order_by(card_refunds.c.created_at)
    )
    return list(found)

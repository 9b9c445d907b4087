"""Top-up orders: the row written before any Stripe call (its id is the Idempotency-Key of
every call made for it), the re-check of what Stripe says was paid against the order, and
the credit that completes it.

A Stripe object is believed only after it was read back from Stripe's API and matches the
order in every part: its id (the session or payment intent the order made), the order id in
its metadata, paid, the amount and the currency. A mismatch is recorded (the order keeps it
in `failure`) and never credited. A match is credited once: `ledger.credit` with the key
`topup:<order id>`, in the same transaction as the order's move to `paid`, so a webhook
delivered twice, a webhook and the reconciliation job, or two replicas at once, credit it
one time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Table, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.billing import ledger
from llmrelay.billing.stripe_config import cents
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import new_id
from llmrelay.store.models_billing import PaymentOrder, Wallet
from llmrelay.store.types import utcnow

CHECKOUT: Final = "checkout"
AUTO_TOPUP: Final = "auto_topup"

CREATED: Final = "created"
PENDING: Final = "pending"
PAID: Final = "paid"
FAILED: Final = "failed"
EXPIRED: Final = "expired"
#: States an order can still leave (towards paid, failed or expired).
OPEN_STATES: Final = (CREATED, PENDING)

orders: Table = PaymentOrder.__table__  # type: ignore[assignment]
wallets: Table = Wallet.__table__  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Order:
    id: str
    tenant_id: str
    kind: str
    amount_micros: int
    currency: str
    status: str
    stripe_session_id: str | None
    stripe_payment_intent_id: str | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a Stripe object says about an order: paid (credit it), not paid yet, failed,
    expired, or a mismatch (never credited; `reason` says what differs)."""

    outcome: str  # paid, unpaid, failed, expired, mismatch
    reason: str | None = None
    customer: str | None = None
    payment_method: str | None = None
    payment_intent: str | None = None


def _order(row: Any) -> Order:
    return Order(
        id=row.id,
        tenant_id=row.tenant_id,
        kind=row.kind,
        amount_micros=int(row.amount_micros),
        currency=row.currency,
        status=row.status,
        stripe_session_id=row.stripe_session_id,
        stripe_payment_intent_id=row.stripe_payment_intent_id,
    )


async def create(
    conn: AsyncConnection,
    tenant_id: str,
    kind: str,
    amount_micros: int,
    *,
    created_by: str | None = None,
    currency: str = "usd",
) -> Order:
    now = utcnow()
    order_id = new_id()
    await conn.execute(
        orders.insert().values(
            id=order_id,
            tenant_id=tenant_id,
            kind=kind,
            amount_micros=amount_micros,
            currency=currency,
            status=CREATED,
            created_by=created_by,
            created_at=now,
            updated_at=now,
        )
    )
    return Order(order_id, tenant_id, kind, amount_micros, currency, CREATED, None, None)


async def get(conn: AsyncConnection, order_id: str) -> Order | None:
    row = (await conn.execute(select(orders).where(orders.c.id == order_id))).first()
    return None if row is None else _order(row)


async def by_stripe_id(
    conn: AsyncConnection, *, session_id: str | None = None, intent_id: str | None = None
) -> Order | None:
    column = orders.c.stripe_session_id if session_id else orders.c.stripe_payment_intent_id
    value = session_id or intent_id
    row = (await conn.execute(select(orders).where(column == value))).first()
    return None if row is None else _order(row)


async def mark(conn: AsyncConnection, order_id: str, status: str, **values: Any) -> bool:
    """Move an open order to `status` (with more columns); False when it was not open."""
    result = await conn.execute(
        update(orders)
        .where(orders.c.id == order_id, orders.c.status.in_(OPEN_STATES))
        .values(status=status, updated_at=utcnow(), **values)
    )
    return bool(result.rowcount)


async def note(conn: AsyncConnection, order_id: str, **values: Any) -> None:
    """Set columns of an order without moving its state (Stripe ids, a failure text)."""
    await conn.execute(
        update(orders).where(orders.c.id == order_id).values(updated_at=utcnow(), **values)
    )


def _metadata_order(obj: dict[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        found = metadata.get("order_id")
        return str(found) if found is not None else None
    return None


def _id(value: Any) -> str | None:
    """An expandable field: an id, or the object with its id."""
    if isinstance(value, dict):
        value = value.get("id")
    return str(value) if isinstance(value, str) and value else None


def check_session(order: Order, session: dict[str, Any]) -> Verdict:
    """A Checkout Session read from Stripe, against the order it should pay."""
    differs = []
    if order.stripe_session_id is None or session.get("id") != order.stripe_session_id:
        differs.append(f"session {session.get('id')!r} is not the order's")
    if _metadata_order(session) != order.id:
        differs.append(f"metadata order_id {_metadata_order(session)!r}")
    reference = session.get("client_reference_id")
    if reference is not None and reference != order.id:
        differs.append(f"client_reference_id {reference!r}")
    if session.get("amount_total") != cents(order.amount_micros):
        differs.append(
            f"amount {session.get('amount_total')} (the order's is {cents(order.amount_micros)})"
        )
    if str(session.get("currency") or "").lower() != order.currency:
        differs.append(f"currency {session.get('currency')!r} (the order's is {order.currency!r})")
    if differs:
        return Verdict("mismatch", "; ".join(differs))
    if session.get("status") == "expired":
        return Verdict("expired")
    if session.get("payment_status") != "paid" or session.get("status") != "complete":
        return Verdict("unpaid")
    return Verdict(
        "paid",
        customer=_id(session.get("customer")),
        payment_intent=_id(session.get("payment_intent")),
    )


def check_intent(order: Order, intent: dict[str, Any]) -> Verdict:
    """A PaymentIntent read from Stripe, against the order it should pay."""
    differs = []
    known = order.stripe_payment_intent_id
    if known is not None and intent.get("id") != known:
        differs.append(f"payment intent {intent.get('id')!r} is not the order's")
    if _metadata_order(intent) != order.id:
        differs.append(f"metadata order_id {_metadata_order(intent)!r}")
    if intent.get("amount") != cents(order.amount_micros):
        differs.append(
            f"amount {intent.get('amount')} (the order's is {cents(order.amount_micros)})"
        )
    if str(intent.get("currency") or "").lower() != order.currency:
        differs.append(f"currency {intent.get('currency')!r} (the order's is {order.currency!r})")
    status = intent.get("status")
    if status == "succeeded" and intent.get("amount_received") != cents(order.amount_micros):
        differs.append(f"amount received {intent.get('amount_received')}")
    if differs:
        return Verdict("mismatch", "; ".join(differs))
    if status == "succeeded":
        return Verdict(
            "paid",
            customer=_id(intent.get("customer")),
            payment_method=_id(intent.get("payment_method")),
            payment_intent=_id(intent.get("id")),
        )
    if status in ("canceled", "requires_payment_method"):
        error = intent.get("last_payment_error")
        reason = error.get("message") if isinstance(error, dict) else None
        return Verdict("failed", reason or f"payment {status}")
    return Verdict("unpaid")


async def credit(conn: AsyncConnection, order: Order, verdict: Verdict, sealer: Sealer) -> bool:
    """Complete a paid order in the caller's transaction: mark it paid, credit the wallet
    once, keep the customer and payment method for auto top-ups. True when this call
    credited (False: it had been already)."""
    await ledger.ensure_wallet(conn, order.tenant_id, prepaid=False)
    extra: dict[str, Any] = {"paid_at": utcnow(), "failure": None}
    if verdict.payment_intent is not None and order.stripe_payment_intent_id is None:
        extra["stripe_payment_intent_id"] = verdict.payment_intent
    # Paid wins over any other state: money Stripe says it took is credited even to an
    # order given up as failed or expired (a payment that completed late).
    await conn.execute(
        update(orders)
        .where(orders.c.id == order.id, orders.c.status != PAID)
        .values(status=PAID, updated_at=utcnow(), **extra)
    )
    moved = await ledger.credit(
        conn,
        order.tenant_id,
        order.amount_micros,
        kind="topup",
        key=f"topup:{order.id}",
        order_id=order.id,
        note=f"{order.kind} top-up",
    )
    saved: dict[str, Any] = {}
    if verdict.customer is not None:
        saved["stripe_customer_id"] = verdict.customer
    if verdict.payment_method is not None:
        sealed = sealer.seal(verdict.payment_method.encode(), context=order.tenant_id)
        saved["payment_method_sealed"] = sealed
    if saved:
        saved["updated_at"] = utcnow()
        await conn.execute(
            update(wallets).where(wallets.c.tenant_id == order.tenant_id).values(**saved)
        )
    return moved.applied


def open_payment_method(sealer: Sealer, tenant_id: str, sealed: str | None) -> str | None:
    return None if sealed is None else sealer.open(sealed, context=tenant_id).decode()

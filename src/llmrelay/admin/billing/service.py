"""The rules of the billing routes. Money moves only through billing/ledger.py (each
movement with its ledger entry, once per idempotency key) and top-ups through
billing/payments.py; this checks who may move what, and words the refusals.

- The wallet's settings (prepaid, auto top-up) are versioned by what they are, not by a
  counter: balances move with every request, so a version that moved with them would make
  every If-Match stale. The ETag is a digest of the settings alone.
- A refund credits the wallet (money back to a card is Stripe's dashboard, then an
  adjustment); one against a request never exceeds what the request was charged, all its
  refunds together. Refunds and adjustments happen once per id: the same id again with the
  same amount changes nothing (`applied: false`), with another amount is a 409.
- Only a reservation whose metering failed is reconciled by hand; a held one may still be
  running (the reconciliation job closes those).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from fastapi import Request
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.billing import repository
from llmrelay.admin.billing.schemas import (
    AdjustmentIn,
    LedgerEntryOut,
    MovementOut,
    OrderOut,
    RefundIn,
    ReservationOut,
    WalletOut,
    WalletPatch,
    usd,
)
from llmrelay.admin.errors import AdminError
from llmrelay.admin.kit.problems import Conflict, Invalid, NotFound, PreconditionRequired, Stale
from llmrelay.billing import ledger
from llmrelay.billing.errors import InsufficientBalance, PaymentProviderError, PaymentsNotConfigured
from llmrelay.billing.payments import Checkout, InvalidTopUp, Payments, check_amount
from llmrelay.store.models_billing import LedgerEntry, PaymentOrder, Reservation, Wallet
from llmrelay.store.types import utcnow

_SETTINGS = (
    "prepaid",
    "auto_topup_enabled",
    "auto_topup_threshold_micros",
    "auto_topup_amount_micros",
)


def wallet_out(tenant_id: str, row: Wallet | None) -> WalletOut:
    if row is None:
        return WalletOut(
            tenant_id=tenant_id,
            exists=False,
            prepaid=False,
            currency="usd",
            balance_micros=0,
            balance_usd="0.000000",
            reserved_micros=0,
            reserved_usd="0.000000",
            auto_topup_enabled=False,
            auto_topup_threshold_micros=None,
            auto_topup_threshold_usd=None,
            auto_topup_amount_micros=None,
            auto_topup_amount_usd=None,
            payment_method_saved=False,
            stripe_customer_id=None,
            updated_at=None,
        )
    return WalletOut(
        tenant_id=tenant_id,
        exists=True,
        prepaid=row.prepaid,
        currency=row.currency,
        balance_micros=row.balance_micros,
        balance_usd=usd(row.balance_micros) or "",
        reserved_micros=row.reserved_micros,
        reserved_usd=usd(row.reserved_micros) or "",
        auto_topup_enabled=row.auto_topup_enabled,
        auto_topup_threshold_micros=row.auto_topup_threshold_micros,
        auto_topup_threshold_usd=usd(row.auto_topup_threshold_micros),
        auto_topup_amount_micros=row.auto_topup_amount_micros,
        auto_topup_amount_usd=usd(row.auto_topup_amount_micros),
        payment_method_saved=row.payment_method_sealed is not None,
        stripe_customer_id=row.stripe_customer_id,
        updated_at=row.updated_at,
    )


def settings_of(out: WalletOut) -> dict[str, Any]:
    """What the wallet's ETag and audit entries cover: its settings, not its balances."""
    return {name: getattr(out, name) for name in _SETTINGS}


def settings_tag(out: WalletOut) -> str:
    digest = hashlib.sha256(orjson.dumps(settings_of(out), option=orjson.OPT_SORT_KEYS))
    return f'"s-{digest.hexdigest()[:16]}"'


def check_settings_tag(request: Request, out: WalletOut) -> None:
    """428 without If-Match, 409 when it names other settings than the stored ones."""
    sent = request.headers.get("if-match")
    if sent is None:
        raise PreconditionRequired()
    sent = sent.strip()
    if sent != "*" and sent.removeprefix("W/") != settings_tag(out):
        raise Stale("the wallet's settings changed since you read them; read them again")


async def update_wallet(
    session: AsyncSession, tenant_id: str, patch: WalletPatch, payments: Payments | None
) -> None:
    """Apply the settings sent (the wallet is made, not prepaid, if the tenant has none)."""
    conn = await session.connection()
    await ledger.ensure_wallet(conn, tenant_id, prepaid=False)
    row = await repository.wallet(session, tenant_id)
    assert row is not None
    changes = patch.changes()
    for name, value in changes.items():
        if name in ("prepaid", "auto_topup_enabled") and value is None:
            raise Invalid(f"{name}: true or false", name)
        setattr(row, name, value)
    if row.auto_topup_enabled:
        _check_auto_topup(row, payments)
    if changes:
        row.updated_at = utcnow()
    await session.flush()


def _check_auto_topup(row: Wallet, payments: Payments | None) -> None:
    if payments is None or payments.stripe is None:
        raise Invalid(
            "auto_topup_enabled: automatic top-ups need Stripe (LLMRELAY_STRIPE_SECRET_KEY)",
            "auto_topup_enabled",
        )
    if row.auto_topup_threshold_micros is None:
        raise Invalid(
            "auto_topup_threshold_micros: required while auto top-up is on",
            "auto_topup_threshold_micros",
        )
    if row.auto_topup_amount_micros is None:
        raise Invalid(
            "auto_topup_amount_micros: required while auto top-up is on",
            "auto_topup_amount_micros",
        )
    try:
        check_amount(payments.stripe.config, row.auto_topup_amount_micros)
    except InvalidTopUp as error:
        raise Invalid(f"auto_topup_amount_micros: {error}", "auto_topup_amount_micros") from None
    if row.payment_method_sealed is None:
        raise Invalid(
            "auto_topup_enabled: no saved payment method yet: pay one Checkout top-up first "
            "(POST /api/admin/billing/{tenant_id}/checkout)",
            "auto_topup_enabled",
        )


def entry_out(row: LedgerEntry) -> LedgerEntryOut:
    return LedgerEntryOut(
        id=row.id,
        kind=row.kind,
        amount_micros=row.amount_micros,
        amount_usd=usd(row.amount_micros) or "",
        reserved_delta_micros=row.reserved_delta_micros,
        balance_after_micros=row.balance_after_micros,
        balance_after_usd=usd(row.balance_after_micros) or "",
        reserved_after_micros=row.reserved_after_micros,
        request_id=row.request_id,
        order_id=row.order_id,
        actor=row.actor,
        note=row.note,
        created_at=row.created_at,
    )


def reservation_out(row: Reservation) -> ReservationOut:
    return ReservationOut(
        request_id=row.request_id,
        project_id=row.project_id,
        key_id=row.key_id,
        status=row.status,
        amount_micros=row.amount_micros,
        amount_usd=usd(row.amount_micros) or "",
        charged_micros=row.charged_micros,
        charged_usd=usd(row.charged_micros),
        created_at=row.created_at,
        settled_at=row.settled_at,
    )


def order_out(row: PaymentOrder) -> OrderOut:
    return OrderOut(
        id=row.id,
        tenant_id=row.tenant_id,
        kind=row.kind,
        status=row.status,
        amount_micros=row.amount_micros,
        amount_usd=usd(row.amount_micros) or "",
        currency=row.currency,
        checkout_url=row.checkout_url,
        stripe_session_id=row.stripe_session_id,
        stripe_payment_intent_id=row.stripe_payment_intent_id,
        failure=row.failure,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        paid_at=row.paid_at,
        refunded_micros=row.refunded_micros,
        disputed_micros=row.disputed_micros,
    )


async def reconcile(
    session: AsyncSession, tenant_id: str, request_id: str, cost: int, actor: str
) -> Reservation:
    row = await repository.reservation(session, request_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"no reservation for request {request_id!r}")
    if row.status != ledger.METERING_FAILED:
        raise Conflict(
            f"the reservation is {row.status}: only one whose metering failed is reconciled "
            "by hand (a held one may still be running)"
        )
    moved = await ledger.reconcile(await session.connection(), request_id, cost, actor=actor)
    if moved is None:
        raise Conflict("the reservation was closed meanwhile")
    found = await repository.reservation(session, request_id)
    assert found is not None
    return found


def idempotency_id(body_id: str | None, request: Request, field: str) -> str:
    """The movement's id: the body's, else the Idempotency-Key header; one is required (a
    retried request must not move money twice)."""
    found = body_id or request.headers.get("idempotency-key")
    if not found or len(found) > 100:
        raise Invalid(
            f"{field}: required (or an Idempotency-Key header, up to 100 characters): the "
            "same id again never moves money twice",
            field,
        )
    return found


async def _previous(session: AsyncSession, key: str) -> LedgerEntry | None:
    found: LedgerEntry | None = await session.scalar(
        select(LedgerEntry).where(LedgerEntry.idempotency_key == key)
    )
    return found


async def refund(
    session: AsyncSession, tenant_id: str, body: RefundIn, refund_id: str, actor: str
) -> MovementOut:
    amount = body.micros
    key = f"refund:{tenant_id}:{refund_id}"
    previous = await _previous(session, key)
    if previous is not None:
        return _again(previous, tenant_id, refund_id, "refund", amount)
    if body.request_id is not None:
        reservation = await repository.reservation(session, body.request_id)
        if reservation is None or reservation.tenant_id != tenant_id:
            raise NotFound(f"request_id: no billed request {body.request_id!r}", "request_id")
        charged = reservation.charged_micros or 0
        already = await repository.refunded_for_request(session, tenant_id, body.request_id)
        if already + amount > charged:
            raise Invalid(
                f"amount: the request was charged {usd(charged)} USD and "
                f"{usd(already)} USD of it is refunded already",
                "amount_micros",
            )
    if body.order_id is not None:
        order = await repository.order(session, body.order_id)
        if order is None or order.tenant_id != tenant_id:
            raise NotFound(f"order_id: no order {body.order_id!r}", "order_id")
    conn = await session.connection()
    await ledger.ensure_wallet(conn, tenant_id, prepaid=False)
    moved = await ledger.credit(
        conn,
        tenant_id,
        amount,
        kind="refund",
        key=key,
        order_id=body.order_id,
        request_id=body.request_id,
        actor=actor,
        note=body.reason,
    )
    return _movement(refund_id, tenant_id, "refund", amount, moved)


async def adjust(
    session: AsyncSession, tenant_id: str, body: AdjustmentIn, adjustment_id: str, actor: str
) -> MovementOut:
    amount = body.micros
    if amount == 0:
        raise Invalid("amount: an adjustment of zero changes nothing", "amount_micros")
    key = f"adjustment:{tenant_id}:{adjustment_id}"
    previous = await _previous(session, key)
    if previous is not None:
        return _again(previous, tenant_id, adjustment_id, "adjustment", amount)
    conn = await session.connection()
    await ledger.ensure_wallet(conn, tenant_id, prepaid=False)
    try:
        moved = await ledger.credit(
            conn, tenant_id, amount, kind="adjustment", key=key, actor=actor, note=body.reason
        )
    except InsufficientBalance as short:
        raise Invalid(f"amount: {short}", "amount_micros") from None
    return _movement(adjustment_id, tenant_id, "adjustment", amount, moved)


def _again(
    previous: LedgerEntry, tenant_id: str, movement_id: str, kind: str, amount: int
) -> MovementOut:
    if previous.kind != kind or previous.amount_micros != amount:
        raise Conflict(
            f"the id {movement_id!r} was used for another {previous.kind} "
            f"({usd(previous.amount_micros)} USD): use a new id"
        )
    return MovementOut(
        id=movement_id,
        tenant_id=tenant_id,
        kind=kind,
        amount_micros=amount,
        amount_usd=usd(amount) or "",
        applied=False,
        balance_micros=previous.balance_after_micros,
        balance_usd=usd(previous.balance_after_micros) or "",
    )


def _movement(
    movement_id: str, tenant_id: str, kind: str, amount: int, moved: ledger.Movement
) -> MovementOut:
    return MovementOut(
        id=movement_id,
        tenant_id=tenant_id,
        kind=kind,
        amount_micros=amount,
        amount_usd=usd(amount) or "",
        applied=moved.applied,
        balance_micros=moved.balance_micros,
        balance_usd=usd(moved.balance_micros) or "",
    )


async def checkout(
    payments: Payments | None, tenant_id: str, amount: int, created_by: str | None
) -> Checkout:
    """Start a Checkout top-up (its own transactions: the order is committed before Stripe
    is called)."""
    if payments is None:
        raise AdminError(503, "top-ups are not available yet (starting)", "unavailable")
    try:
        return await payments.start_checkout(tenant_id, amount, created_by=created_by)
    except InvalidTopUp as error:
        raise Invalid(f"amount: {error}", "amount_micros") from None
    except PaymentsNotConfigured as error:
        raise AdminError(503, str(error), "unavailable") from None
    except PaymentProviderError as error:
        raise AdminError(502, str(error), "payment_provider_error") from None

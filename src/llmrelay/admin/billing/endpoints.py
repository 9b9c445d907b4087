"""/api/admin/billing/{tenant_id}/...: HTTP only; the rules are in service.py.

GET   /wallet                                   balances, prepaid, auto top-up (ETag)
PATCH /wallet                                   prepaid and auto top-up (If-Match)
GET   /ledger                                   entries, newest first (filters)
GET   /reservations                             by status, newest first
POST  /reservations/{request_id}/reconcile      a metering_failed one, with its cost
POST  /refunds                                  credit back, once per refund id
POST  /adjustments                              platform admins: a signed correction
GET   /orders, /orders/{order_id}               top-up orders
POST  /checkout                                 a Checkout top-up: the URL to pay at
POST  /orders/{order_id}/refund                 money back to the card, once per refund id
GET   /disputes                                 chargebacks of top-ups (held, won, lost)
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.billing import chargebacks, repository, service
from llmrelay.admin.billing.schemas import (
    AdjustmentIn,
    CardRefundIn,
    CardRefundOut,
    CheckoutIn,
    CheckoutOut,
    DisputeList,
    LedgerPage,
    MovementOut,
    OrderOut,
    OrderPage,
    ReconcileIn,
    RefundIn,
    ReservationOut,
    ReservationPage,
    WalletOut,
    WalletPatch,
)
from llmrelay.admin.errors import AdminError, documented
from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.http import Cursor, Limit, Session, commit_change, fields, state
from llmrelay.admin.kit.params import When
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.versions import commit

router = APIRouter(prefix="/billing/{tenant_id}", tags=["billing"])
Reader = Annotated[Actor, Depends(require("billing:read"))]
Writer = Annotated[Actor, Depends(require("billing:write"))]

EntryKind = Literal[
    "topup", "reserve", "charge", "release", "refund", "adjustment", "metering_failed",
    "dispute_hold", "dispute_release", "dispute_loss", "card_refund", "card_refund_reversal",
    "lease", "lease_return",
]  # fmt: skip
ReservationStatus = Literal["held", "settled", "released", "metering_failed"]
OrderStatus = Literal["created", "pending", "paid", "failed", "expired", "refunded"]
_PAYMENT_ERRORS = documented(
    {502: "Stripe refused the call", 503: "Stripe is not configured (or not started yet)"}
)


async def _tenant(session: AsyncSession, actor: Actor, permission: str, tenant_id: str) -> None:
    """404 for a tenant that does not exist or is not the caller's, 403 for a role without
    the permission there."""
    actor.ensure(permission, tenant_id)
    if not await lookups.tenant_exists(session, tenant_id):
        raise NotFound(f"no tenant {tenant_id!r}")


def _who(actor: Actor) -> str:
    return actor.user_id or actor.kind


@router.get("/wallet")
async def get_wallet(
    tenant_id: str, response: Response, session: Session, actor: Reader
) -> WalletOut:
    """The wallet (all zero and not prepaid while the tenant has none). The ETag covers the
    settings, not the balances."""
    await _tenant(session, actor, "billing:read", tenant_id)
    out = service.wallet_out(tenant_id, await repository.wallet(session, tenant_id))
    response.headers["ETag"] = service.settings_tag(out)
    return out


@router.patch("/wallet")
async def update_wallet(
    request: Request,
    response: Response,
    tenant_id: str,
    body: WalletPatch,
    session: Session,
    actor: Writer,
) -> WalletOut:
    """Turn prepaid on or off (the data plane follows within seconds) and set the automatic
    top-up (threshold and amount; on only with a saved payment method). If-Match: the ETag
    a read gave."""
    await _tenant(session, actor, "billing:write", tenant_id)
    before = service.wallet_out(tenant_id, await repository.wallet(session, tenant_id))
    service.check_settings_tag(request, before)
    await service.update_wallet(session, tenant_id, body, state(request).payments)
    after = service.wallet_out(tenant_id, await repository.wallet(session, tenant_id))
    audit.note(
        request,
        "wallet.update",
        "wallet",
        tenant_id,
        service.settings_of(before),
        service.settings_of(after),
        tenant_id,
    )
    await commit_change(request, session)  # `prepaid` is in the data plane's snapshot
    response.headers["ETag"] = service.settings_tag(after)
    return after


@router.get("/ledger")
async def list_ledger(
    tenant_id: str,
    session: Session,
    actor: Reader,
    kind: EntryKind | None = None,
    request_id: Annotated[str | None, Query(max_length=64)] = None,
    order_id: Annotated[str | None, Query(max_length=32)] = None,
    since: When = None,
    until: When = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> LedgerPage:
    """Every movement of the wallet's money, newest first; `until` excluded."""
    await _tenant(session, actor, "billing:read", tenant_id)
    rows, next_cursor = await repository.ledger_page(
        session,
        tenant_id,
        kind=kind,
        request_id=request_id,
        order_id=order_id,
        since=since,
        until=until,
        limit=limit,
        cursor=cursor,
    )
    return LedgerPage(data=[service.entry_out(r) for r in rows], next_cursor=next_cursor)


@router.get("/reservations")
async def list_reservations(
    tenant_id: str,
    session: Session,
    actor: Reader,
    status: ReservationStatus | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> ReservationPage:
    """Reservations of prepaid requests, newest first."""
    await _tenant(session, actor, "billing:read", tenant_id)
    rows, next_cursor = await repository.reservation_page(session, tenant_id, status, limit, cursor)
    return ReservationPage(data=[service.reservation_out(r) for r in rows], next_cursor=next_cursor)


@router.post("/reservations/{request_id}/reconcile")
async def reconcile_reservation(
    request: Request,
    tenant_id: str,
    request_id: str,
    body: ReconcileIn,
    session: Session,
    actor: Writer,
) -> ReservationOut:
    """Settle a reservation whose metering failed, with the cost decided (0 releases it)."""
    await _tenant(session, actor, "billing:write", tenant_id)
    assert body.cost_micros is not None
    before = await repository.reservation(session, request_id)
    shown = None if before is None else service.reservation_out(before)
    audit.note(request, "reservation.reconcile", "reservation", request_id, None, None, tenant_id)
    row = await service.reconcile(session, tenant_id, request_id, body.cost_micros, _who(actor))
    out = service.reservation_out(row)
    audit.note(
        request,
        "reservation.reconcile",
        "reservation",
        request_id,
        None if shown is None else fields(shown),
        fields(out),
        tenant_id,
    )
    await commit(session)
    return out


@router.post("/refunds", status_code=201)
async def refund(
    request: Request, tenant_id: str, body: RefundIn, session: Session, actor: Writer
) -> MovementOut:
    """Credit money back to the wallet, at most once per `refund_id` (or Idempotency-Key);
    against a request (`request_id`), never more than it was charged."""
    await _tenant(session, actor, "billing:write", tenant_id)
    refund_id = service.idempotency_id(body.refund_id, request, "refund_id")
    audit.note(request, "billing.refund", "refund", refund_id, None, None, tenant_id)
    out = await service.refund(session, tenant_id, body, refund_id, _who(actor))
    after = fields(out) | {"reason": body.reason, "request_id": body.request_id}
    audit.note(request, "billing.refund", "refund", refund_id, None, after, tenant_id)
    await commit(session)
    return out


@router.post("/adjustments", status_code=201)
async def adjust(
    request: Request, tenant_id: str, body: AdjustmentIn, session: Session, actor: Writer
) -> MovementOut:
    """A manual correction of the balance (platform admins only), once per
    `adjustment_id` (or Idempotency-Key)."""
    if not actor.platform_admin:
        raise AdminError(403, "only a platform admin adjusts a balance", "permission_error")
    await _tenant(session, actor, "billing:write", tenant_id)
    adjustment_id = service.idempotency_id(body.adjustment_id, request, "adjustment_id")
    audit.note(request, "billing.adjustment", "adjustment", adjustment_id, None, None, tenant_id)
    out = await service.adjust(session, tenant_id, body, adjustment_id, _who(actor))
    after = fields(out) | {"reason": body.reason}
    audit.note(request, "billing.adjustment", "adjustment", adjustment_id, None, after, tenant_id)
    await commit(session)
    return out


@router.get("/orders")
async def list_orders(
    tenant_id: str,
    session: Session,
    actor: Reader,
    status: OrderStatus | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> OrderPage:
    """Top-up orders (Checkout and automatic), newest first."""
    await _tenant(session, actor, "billing:read", tenant_id)
    rows, next_cursor = await repository.order_page(session, tenant_id, status, limit, cursor)
    return OrderPage(data=[service.order_out(r) for r in rows], next_cursor=next_cursor)


@router.get("/orders/{order_id}")
async def get_order(tenant_id: str, order_id: str, session: Session, actor: Reader) -> OrderOut:
    await _tenant(session, actor, "billing:read", tenant_id)
    row = await repository.order(session, order_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"no order {order_id!r}")
    return service.order_out(row)


@router.post("/checkout", status_code=201, responses=_PAYMENT_ERRORS)
async def checkout(
    request: Request, tenant_id: str, body: CheckoutIn, session: Session, actor: Writer
) -> CheckoutOut:
    """A top-up paid on Stripe's Checkout page: the order, and the `checkout_url` to send
    the payer to. The wallet is credited when Stripe's webhook (or the reconciliation job)
    confirms the payment."""
    await _tenant(session, actor, "billing:write", tenant_id)
    await session.commit()  # the session holds no lock while Stripe is called
    audit.note(request, "order.checkout", "order", None, None, None, tenant_id)
    made = await service.checkout(
        state(request).payments, tenant_id, body.micros, actor.user_id or actor.kind
    )
    row = await repository.order(session, made.order.id)
    assert row is not None
    out = CheckoutOut.model_validate(service.order_out(row).model_dump())
    audit.note(request, "order.checkout", "order", row.id, None, fields(out), tenant_id)
    return out


@router.post("/orders/{order_id}/refund", status_code=201, responses=_PAYMENT_ERRORS)
async def refund_to_card(
    request: Request,
    tenant_id: str,
    order_id: str,
    body: CardRefundIn,
    session: Session,
    actor: Writer,
) -> CardRefundOut:
    """Send part or all of a paid top-up back to its card through Stripe's refund API,
    taking it from the wallet once (never more than the payment has left, nor more than the
    available balance). At most once per `refund_id` (or Idempotency-Key): asked again, a
    pending refund is asked of Stripe with the same Idempotency-Key."""
    await _tenant(session, actor, "billing:write", tenant_id)
    refund_id = service.idempotency_id(body.refund_id, request, "refund_id")
    await session.commit()  # the session holds no lock while Stripe is called
    audit.note(request, "order.refund", "order", order_id, None, None, tenant_id)
    out = await chargebacks.refund_to_card(
        state(request).payments, tenant_id, order_id, body, refund_id, _who(actor)
    )
    audit.note(request, "order.refund", "order", order_id, None, fields(out), tenant_id)
    return out


@router.get("/disputes")
async def list_disputes(tenant_id: str, session: Session, actor: Reader) -> DisputeList:
    """The chargebacks of the tenant's top-ups, newest first."""
    await _tenant(session, actor, "billing:read", tenant_id)
    rows = await chargebacks.disputes.of_tenant(await session.connection(), tenant_id)
    return DisputeList(data=[chargebacks.dispute_out(r) for r in rows])

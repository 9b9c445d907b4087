"""The reconciliation job (`billing_reconcile`, periodic): what a webhook that never came or
a process that died left open is closed from the source of truth.

- Top-up orders still open LLMRELAY_BILLING_ORDER_PENDING_S after their last change are
  looked up at Stripe and completed (re-checked, credited once), failed or expired
  (payments.py). A Checkout order that never got its session (the process stopped between
  the order and the Stripe call) is failed: nobody was sent to pay it.
- Reservations still `held` after the longest any request can wait for its answer (the
  largest model deadline) plus LLMRELAY_BILLING_RESERVATION_MARGIN_S were never settled:
  each is settled from its request's record by the same rule as a live settle
  (charge.py), or marked `metering_failed` when no record exists (the process stopped
  before writing it: the operator reconciles it through the admin API). A stream still
  running past that horizon is settled by its own end all the same (prepaid.settle_one).
- Reservations kept `metering_failed` whose record has landed since with a cost it can say
  (a record spooled through a database outage is written after the reconciliation that
  found none) are settled from it by the same rule: what a live settle would have charged.
- Wallet leases nobody renewed for their TTL plus half of it (their process died) are
  closed: the held rows written under them settled from their records, the rest given back
  (lease_reclaim.py). Held rows under a lease still open are its owner's, never touched here.
- Refunds to the card still `pending` LLMRELAY_BILLING_ORDER_PENDING_S after their last
  change (Stripe was unreachable and nobody asked again) are asked of Stripe again with the
  same Idempotency-Key (card_refunds.resume_pending): made once, or refused and given back.

Counts go to the log, the metrics (`llmrelay_billing_reconciled`) and the job's result.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any, Final

import structlog
from sqlalchemy import Table, or_, select

from llmrelay.billing import card_refunds, lease_store, ledger, orders
from llmrelay.billing.charge import charge_known, charge_of
from llmrelay.billing.errors import PaymentProviderError
from llmrelay.billing.lease_reclaim import reclaim_expired
from llmrelay.billing.payments import Payments
from llmrelay.billing.settle import settle_one
from llmrelay.billing.stripe_config import StripeConfig
from llmrelay.jobs.kinds import JobContext, RetryLater
from llmrelay.observability.metrics import Metrics
from llmrelay.store.db import background_begin, background_connect
from llmrelay.store.models import RequestRecord
from llmrelay.store.models_billing import PaymentOrder, Reservation
from llmrelay.store.types import utcnow

log = structlog.get_logger(__name__)

KIND: Final = "billing_reconcile"
#: Rows looked at per run (the next run takes the rest).
BATCH: Final = 500
#: The deadline assumed when no snapshot is at hand (the models' default).
DEFAULT_DEADLINE_S: Final = 300.0

records: Table = RequestRecord.__table__  # type: ignore[assignment]


async def run(ctx: JobContext) -> dict[str, Any] | None:
    services = ctx.services
    settings = services.settings
    runtime = services.dispatcher.runtime
    metrics = runtime.metrics if runtime is not None else None
    horizon_s = longest_deadline(services) + settings.billing_reservation_margin_s
    config = StripeConfig.from_settings(settings)
    payments = Payments.from_config(services.engine, services.sealer, config, metrics)
    try:
        counts = await reconcile(
            payments,
            order_after_s=settings.billing_order_pending_s,
            reservation_after_s=horizon_s,
            metrics=metrics,
            lease_grace_s=settings.billing_lease_ttl_s / 2,
        )
    finally:
        await payments.close()
    return counts


def longest_deadline(services: Any) -> float:
    runtime = services.dispatcher.runtime
    if runtime is None or not runtime.snapshots.loaded:
        return DEFAULT_DEADLINE_S
    deadlines = [
        model.deadline_s
        for models in runtime.snapshots.current.models.values()
        for model in models.values()
    ]
    return max(deadlines, default=DEFAULT_DEADLINE_S)


async def reconcile(
    payments: Payments,
    *,
    order_after_s: float,
    reservation_after_s: float,
    metrics: Metrics | None = None,
    lease_grace_s: float = 60.0,
) -> dict[str, Any]:
    reclaimed = await reclaim_expired(payments.engine, grace_s=lease_grace_s)
    counts: dict[str, Any] = {
        "leases": {"reclaimed": reclaimed} if reclaimed else {},
        "orders": dict(await reconcile_orders(payments, order_after_s)),
        "reservations": dict(await reconcile_reservations(payments, reservation_after_s)),
        "late_records": dict(await settle_late_records(payments)),
        "card_refunds": dict(await card_refunds.resume_pending(payments, order_after_s)),
    }
    if metrics is not None:
        for what, outcomes in counts.items():
            for outcome, n in outcomes.items():
                metrics.billing_reconciled.labels(what, outcome).inc(n)
    log.info("billing_reconciled", **counts)
    return counts


async def reconcile_orders(payments: Payments, after_s: float) -> Counter[str]:
    counts: Counter[str] = Counter()
    if payments.stripe is None:
        return counts
    table = PaymentOrder.__table__
    before = utcnow() - timedelta(seconds=after_s)
    async with background_connect(payments.engine) as conn:
        rows = (
            await conn.execute(
                select(table.c.id)
                .where(table.c.status.in_(orders.OPEN_STATES), table.c.updated_at <= before)
                .order_by(table.c.updated_at)
                .limit(BATCH)
            )
        ).all()
    for (order_id,) in rows:
        async with background_connect(payments.engine) as conn:
            order = await orders.get(conn, order_id)
        if order is None or order.status not in orders.OPEN_STATES:
            continue
        if order.stripe_session_id is None and order.stripe_payment_intent_id is None:
            if order.kind == orders.CHECKOUT:
                async with background_begin(payments.engine) as conn:
                    await orders.mark(
                        conn, order.id, orders.FAILED, failure="the Checkout session was never made"
                    )
                counts["failed"] += 1
            continue  # an automatic top-up's own job (its checkpoint) finishes it
        try:
            verdict = await payments.recheck(order)
        except PaymentProviderError as error:
            log.warning("reconcile_order_unreachable", order_id=order.id, error=str(error))
            if error.retryable:
                raise RetryLater(str(error)) from error
            counts["unreadable"] += 1
            continue
        counts[await payments.apply(order, verdict)] += 1
    return counts


async def reconcile_reservations(payments: Payments, after_s: float) -> Counter[str]:
    counts: Counter[str] = Counter()
    table = Reservation.__table__
    before = utcnow() - timedelta(seconds=after_s)
    leases = lease_store.leases
    open_leases = select(leases.c.id).where(leases.c.status == lease_store.OPEN)
    async with background_connect(payments.engine) as conn:
        held = (
            await conn.execute(
                select(table.c.request_id, table.c.tenant_id)
                .where(
                    table.c.status == ledger.HELD,
                    table.c.created_at <= before,
                    or_(table.c.lease_id.is_(None), table.c.lease_id.not_in(open_leases)),
                )
                .order_by(table.c.created_at)
                .limit(BATCH)
            )
        ).all()
    for request_id, tenant_id in held:
        async with background_begin(payments.engine) as conn:
            record = (
                await conn.execute(
                    select(*_CHARGE_COLUMNS).where(records.c.request_id == request_id)
                )
            ).first()
            if record is None:
                charge = None
                log.warning("reservation_without_record", request_id=request_id)
            else:
                charge = charge_of(*_charge_args(record))
            outcome = await settle_one(conn, request_id, tenant_id, charge)
        counts[outcome] += 1
    return counts


async def settle_late_records(payments: Payments) -> Counter[str]:
    """Settle `metering_failed` reservations from records written after they were kept (one
    transaction each; a live settle arriving too closes it once: one claim per reservation)."""
    counts: Counter[str] = Counter()
    table = Reservation.__table__
    async with background_connect(payments.engine) as conn:
        late = (
            await conn.execute(
                select(table.c.request_id, table.c.tenant_id, *_CHARGE_COLUMNS)
                .join(records, records.c.request_id == table.c.request_id)
                .where(table.c.status == ledger.METERING_FAILED, charge_known(records))
                .order_by(table.c.created_at)
                .limit(BATCH)
            )
        ).all()
    for row in late:
        charge = charge_of(*_charge_args(row[2:]))
        if charge is None:  # charge_known said otherwise: the one rule decides
            continue
        async with background_begin(payments.engine) as conn:
            outcome = await settle_one(conn, str(row[0]), row[1], charge)
        counts[outcome] += 1
    return counts


#: What charge_of reads of a record, in its order.
_CHARGE_COLUMNS: Final = (
    records.c.status_code,
    records.c.attempts,
    records.c.usage_source,
    records.c.cost_micros,
    records.c.price_source,
)


def _charge_args(row: Any) -> tuple[int, int, str | None, int | None, str | None]:
    return int(row[0]), int(row[1] or 0), row[2], row[3], row[4]

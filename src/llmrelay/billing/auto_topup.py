"""The automatic top-up job (`billing_auto_topup`, one live job per wallet): queued by a
settle that leaves the available balance under the wallet's threshold (prepaid.py), it
charges the saved payment method off-session for the wallet's auto top-up amount.

The order row is committed, and its id saved as the job's checkpoint, before Stripe is
called: a retried attempt (a network error, a worker that died) sends the same order id as
the Idempotency-Key and so gets the same PaymentIntent, never a second charge. The wallet is
credited when the PaymentIntent's `payment_intent.succeeded` webhook is verified and
re-checked (payments.py), or by the reconciliation job.

Skipped (the job succeeds with the reason) when auto top-up is off, the balance is no longer
under the threshold, an automatic top-up is already pending, or the last one failed within
FAILED_PAUSE_S (a declined card is not retried on every request).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

import structlog
from sqlalchemy import select

from llmrelay.billing import orders
from llmrelay.billing.errors import BillingError, PaymentProviderError
from llmrelay.billing.payments import Payments
from llmrelay.billing.stripe_config import StripeConfig
from llmrelay.jobs.kinds import GiveUp, JobContext, RetryLater
from llmrelay.store.models_billing import PaymentOrder, Wallet
from llmrelay.store.types import utcnow

log = structlog.get_logger(__name__)

#: After a failed automatic top-up, the next is not tried for this long (an hour).
FAILED_PAUSE_S: Final = 3600.0


async def run(ctx: JobContext) -> dict[str, Any] | None:
    services = ctx.services
    config = StripeConfig.from_settings(services.settings)
    if config is None:
        raise GiveUp("automatic top-up needs Stripe (LLMRELAY_STRIPE_SECRET_KEY)")
    payments = Payments.from_config(services.engine, services.sealer, config)
    try:
        return await _top_up(ctx, payments, str(ctx.payload["tenant_id"]))
    finally:
        await payments.close()


async def _top_up(ctx: JobContext, payments: Payments, tenant_id: str) -> dict[str, Any]:
    engine = payments.engine
    async with engine.connect() as conn:
        wallet = (
            await conn.execute(select(Wallet.__table__).where(Wallet.tenant_id == tenant_id))
        ).first()
    if wallet is None:
        raise GiveUp(f"tenant {tenant_id} has no wallet")
    checkpoint = ctx.checkpoint or {}
    order_id = checkpoint.get("order_id")
    if order_id is None:
        skipped = await _skip_reason(payments, wallet)
        if skipped is not None:
            log.info("auto_topup_skipped", tenant_id=tenant_id, reason=skipped)
            return {"skipped": skipped}
        async with engine.begin() as conn:
            order = await orders.create(
                conn, tenant_id, orders.AUTO_TOPUP, int(wallet.auto_topup_amount_micros)
            )
        order_id = order.id
        await ctx.save_checkpoint({"order_id": order_id})
    else:
        async with engine.connect() as conn:
            found = await orders.get(conn, str(order_id))
        if found is None:
            raise GiveUp(f"the order {order_id} of this top-up is gone")
        order = found
    method = orders.open_payment_method(payments.sealer, tenant_id, wallet.payment_method_sealed)
    if method is None or wallet.stripe_customer_id is None:
        async with engine.begin() as conn:
            await orders.mark(conn, order.id, orders.FAILED, failure="no saved payment method")
        raise GiveUp("no saved payment method: pay one Checkout top-up first")
    try:
        intent = await payments.api().create_off_session_payment(
            order.id, tenant_id, order.amount_micros, wallet.stripe_customer_id, method
        )
    except PaymentProviderError as error:
        if error.retryable and not ctx.is_last_attempt:
            raise RetryLater(str(error)) from error
        async with engine.begin() as conn:
            await orders.mark(conn, order.id, orders.FAILED, failure=str(error)[:2000])
        log.warning("auto_topup_failed", tenant_id=tenant_id, order_id=order.id, error=str(error))
        raise GiveUp(str(error), {"order_id": order.id, "status": orders.FAILED}) from error
    except BillingError as error:
        raise GiveUp(str(error)) from error
    async with engine.begin() as conn:
        await orders.mark(
            conn, order.id, orders.PENDING, stripe_payment_intent_id=str(intent["id"])
        )
    log.info("auto_topup_started", tenant_id=tenant_id, order_id=order.id, intent=intent["id"])
    return {"order_id": order.id, "payment_intent": intent["id"], "status": intent.get("status")}


async def _skip_reason(payments: Payments, wallet: Any) -> str | None:
    if not wallet.auto_topup_enabled or wallet.auto_topup_amount_micros is None:
        return "auto top-up is off"
    threshold = wallet.auto_topup_threshold_micros
    if threshold is None or int(wallet.balance_micros) >= int(threshold):
        return "the balance is not under the threshold"
    table = PaymentOrder.__table__
    since = utcnow() - timedelta(seconds=FAILED_PAUSE_S)
    async with payments.engine.connect() as conn:
        recent = (
            await conn.execute(
                select(table.c.status)
                .where(
                    table.c.tenant_id == wallet.tenant_id,
                    table.c.kind == orders.AUTO_TOPUP,
                    (table.c.status.in_(orders.OPEN_STATES))
                    | ((table.c.status == orders.FAILED) & (table.c.updated_at > since)),
                )
                .limit(1)
            )
        ).first()
    if recent is None:
        return None
    if recent[0] == orders.FAILED:
        return "the last automatic top-up failed less than an hour ago"
    return "an automatic top-up is pending"

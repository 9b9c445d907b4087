"""Top-ups through Stripe for one process: Checkout sessions a person pays, the webhook
events Stripe sends about them (and about automatic top-ups), and completing an order from
what Stripe's API says, re-checked (orders.py), whoever asks: the webhook, the
reconciliation job (reconcile.py).

The order row is committed before Stripe is called, so its id (the Idempotency-Key) exists
whatever happens next; every later step is its own short transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog
from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmrelay.billing import disputes, ledger, orders
from llmrelay.billing.errors import BillingError, PaymentsNotConfigured, usd
from llmrelay.billing.orders import Order, Verdict
from llmrelay.billing.stripe_config import MICROS_PER_CENT, StripeConfig
from llmrelay.observability.metrics import Metrics
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import Tenant
from llmrelay.store.models_billing import StripeEvent, Wallet
from llmrelay.store.types import utcnow

if TYPE_CHECKING:
    from llmrelay.billing.stripe_api import StripeApi

log = structlog.get_logger(__name__)

events: Table = StripeEvent.__table__  # type: ignore[assignment]
wallets: Table = Wallet.__table__  # type: ignore[assignment]

#: Checkout Session events: a completion (paid at once, or later for delayed methods), a
#: delayed payment's failure, and an expiry.
SESSION_EVENTS: Final = frozenset(
    {
        "checkout.session.completed",
        "checkout.session.async_payment_succeeded",
        "checkout.session.async_payment_failed",
        "checkout.session.expired",
    }
)
#: PaymentIntent events: they complete automatic top-ups (Checkout's are completed by the
#: session's events).
INTENT_EVENTS: Final = frozenset({"payment_intent.succeeded", "payment_intent.payment_failed"})


class InvalidTopUp(BillingError):
    """A top-up amount outside the settings' bounds or not a whole number of cents."""


@dataclass(frozen=True, slots=True)
class Checkout:
    order: Order
    url: str
    session_id: str


def check_amount(config: StripeConfig, amount_micros: int) -> None:
    if amount_micros % MICROS_PER_CENT:
        raise InvalidTopUp("a top-up is a whole number of cents")
    if not config.min_topup_micros <= amount_micros <= config.max_topup_micros:
        low, high = config.min_topup_micros, config.max_topup_micros
        raise InvalidTopUp(
            f"a top-up is between {usd(low)} and {usd(high)} "
            "(LLMRELAY_STRIPE_MIN_TOPUP_USD, LLMRELAY_STRIPE_MAX_TOPUP_USD)"
        )


class Payments:
    def __init__(
        self,
        engine: AsyncEngine,
        sealer: Sealer,
        stripe: StripeApi | None,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self.engine = engine
        self.sealer = sealer
        self.stripe = stripe
        self._metrics = metrics

    @classmethod
    def from_config(
        cls,
        engine: AsyncEngine,
        sealer: Sealer,
        config: StripeConfig | None,
        metrics: Metrics | None = None,
    ) -> Payments:
        if config is None:
            return cls(engine, sealer, None, metrics=metrics)
        from llmrelay.billing.stripe_api import StripeApi  # the SDK only when configured

        return cls(engine, sealer, StripeApi(config), metrics=metrics)

    async def close(self) -> None:
        if self.stripe is not None:
            await self.stripe.close()

    def api(self) -> StripeApi:
        if self.stripe is None:
            raise PaymentsNotConfigured(
                "top-ups need Stripe: set LLMRELAY_STRIPE_SECRET_KEY (docs/billing.md)"
            )
        return self.stripe

    # -- Checkout --------------------------------------------------------------------------

    async def start_checkout(
        self, tenant_id: str, amount_micros: int, *, created_by: str | None
    ) -> Checkout:
        """A new order and the Checkout Session that pays it; the URL to send the payer to."""
        api = self.api()
        check_amount(api.config, amount_micros)
        async with self.engine.begin() as conn:
            await ledger.ensure_wallet(conn, tenant_id, prepaid=False)
            order = await orders.create(
                conn, tenant_id, orders.CHECKOUT, amount_micros, created_by=created_by
            )
            customer, name = await _customer(conn, tenant_id)
        try:
            if customer is None:
                customer = await api.create_customer(tenant_id, name)
                async with self.engine.begin() as conn:
                    await conn.execute(
                        update(wallets)
                        .where(wallets.c.tenant_id == tenant_id)
                        .values(stripe_customer_id=customer, updated_at=utcnow())
                    )
            session = await api.create_checkout_session(
                order.id, tenant_id, amount_micros, customer
            )
        except BillingError as error:
            async with self.engine.begin() as conn:
                await orders.mark(conn, order.id, orders.FAILED, failure=str(error)[:2000])
            raise
        session_id, url = str(session["id"]), str(session.get("url") or "")
        async with self.engine.begin() as conn:
            await orders.mark(
                conn,
                order.id,
                orders.PENDING,
                stripe_session_id=session_id,
                checkout_url=url,
            )
        pending = Order(
            order.id, tenant_id, order.kind, amount_micros, order.currency, orders.PENDING,
            session_id, None,
        )  # fmt: skip
        return Checkout(pending, url, session_id)

    # -- webhooks --------------------------------------------------------------------------

    async def receive(self, payload: bytes, signature: str | None) -> str:
        """Handle one webhook delivery whose signature verify_event checked; the outcome
        (credited, ignored, duplicate, mismatch, failed, expired, pending; for disputes
        held, won, lost: disputes.py). Raises
        PaymentProviderError when Stripe could not be asked (the delivery is answered 503:
        Stripe retries it)."""
        event = self.api().verify_event(payload, signature)
        outcome = await self.handle_event(event)
        self._count("webhook", outcome)
        return outcome

    async def handle_event(self, event: dict[str, Any]) -> str:
        event_id, kind = str(event["id"]), str(event.get("type") or "")
        data = event.get("data")
        obj = data.get("object") if isinstance(data, dict) else None
        if not isinstance(obj, dict):
            obj = {}
        async with self.engine.begin() as conn:
            if not await _remember(conn, event_id, kind):
                log.info("stripe_event_duplicate", event_id=event_id, type=kind)
                return "duplicate"
        order: Order | None = None
        detail: str | None = None
        order_id: str | None = None
        if kind in SESSION_EVENTS or kind in INTENT_EVENTS:
            order = await self._order_of(obj, session=kind in SESSION_EVENTS)
        if kind in disputes.EVENTS:
            outcome, detail, order_id = await disputes.handle(self, obj)
        elif order is None:
            outcome, detail = "ignored", "not an event about a top-up order of this gateway"
        elif kind in INTENT_EVENTS and order.kind != orders.AUTO_TOPUP:
            outcome, detail = "ignored", "a Checkout payment: its session's events complete it"
        else:
            verdict = await self.recheck(order, object_id=_text(obj.get("id")))
            if kind == "checkout.session.async_payment_failed" and verdict.outcome == "unpaid":
                verdict = Verdict("failed", "the delayed payment failed")
            outcome = await self.apply(order, verdict)
            detail = verdict.reason
        if order is not None:
            order_id = order.id
        async with self.engine.begin() as conn:
            await conn.execute(
                update(events)
                .where(events.c.id == event_id)
                .values(
                    outcome=outcome,
                    detail=detail,
                    order_id=order_id,
                    processed_at=utcnow(),
                )
            )
        log.info("stripe_event", event_id=event_id, type=kind, outcome=outcome, detail=detail)
        return outcome

    async def _order_of(self, obj: dict[str, Any], *, session: bool) -> Order | None:
        """The order an event's object names (its metadata, else its Stripe id)."""
        metadata = obj.get("metadata")
        named = metadata.get("order_id") if isinstance(metadata, dict) else None
        if session and named is None:
            named = obj.get("client_reference_id")
        async with self.engine.connect() as conn:
            if isinstance(named, str) and named:
                found = await orders.get(conn, named)
                if found is not None:
                    return found
            object_id = _text(obj.get("id"))
            if object_id is None:
                return None
            if session:
                return await orders.by_stripe_id(conn, session_id=object_id)
            return await orders.by_stripe_id(conn, intent_id=object_id)

    # -- re-check and complete ---------------------------------------------------------------

    async def recheck(self, order: Order, *, object_id: str | None = None) -> Verdict:
        """What Stripe's API (never the event's copy) says about the order. `object_id`: the
        session or intent an event named (the order's own when None)."""
        api = self.api()
        if order.kind == orders.CHECKOUT:
            session_id = object_id or order.stripe_session_id
            if session_id is None:
                return Verdict("unpaid", "no Checkout session yet")
            verdict = orders.check_session(order, await api.retrieve_session(session_id))
            if verdict.outcome == "paid" and verdict.payment_intent is not None:
                intent = await api.retrieve_intent(verdict.payment_intent)
                method = intent.get("payment_method")
                if isinstance(method, dict):
                    method = method.get("id")
                verdict = Verdict(
                    "paid",
                    customer=verdict.customer,
                    payment_method=method if isinstance(method, str) else None,
                    payment_intent=verdict.payment_intent,
                )
            return verdict
        intent_id = object_id or order.stripe_payment_intent_id
        if intent_id is None:
            return Verdict("unpaid", "no payment intent yet")
        return orders.check_intent(order, await api.retrieve_intent(intent_id))

    async def apply(self, order: Order, verdict: Verdict) -> str:
        """Complete, fail, expire or flag the order by the re-checked verdict."""
        async with self.engine.begin() as conn:
            if verdict.outcome == "paid":
                credited = await orders.credit(conn, order, verdict, self.sealer)
                outcome = "credited" if credited else "duplicate"
            elif verdict.outcome == "failed":
                await orders.mark(conn, order.id, orders.FAILED, failure=verdict.reason)
                outcome = "failed"
            elif verdict.outcome == "expired":
                await orders.mark(conn, order.id, orders.EXPIRED)
                outcome = "expired"
            elif verdict.outcome == "mismatch":
                await orders.note(conn, order.id, failure=f"re-check failed: {verdict.reason}")
                outcome = "mismatch"
            else:
                outcome = "pending"
        if outcome == "mismatch":
            log.error("stripe_order_mismatch", order_id=order.id, reason=verdict.reason)
        elif outcome == "credited":
            log.info("topup_credited", order_id=order.id, tenant_id=order.tenant_id)
        return outcome

    def _count(self, what: str, outcome: str) -> None:
        if self._metrics is None:
            return
        if what == "webhook":
            self._metrics.billing_webhooks.labels(outcome).inc()
        else:
            self._metrics.billing_reconciled.labels(what, outcome).inc()

    def count_bad_signature(self) -> None:
        self._count("webhook", "bad_signature")


async def _customer(conn: AsyncConnection, tenant_id: str) -> tuple[str | None, str]:
    row = (
        await conn.execute(
            select(wallets.c.stripe_customer_id, Tenant.name)
            .select_from(wallets.join(Tenant.__table__, Tenant.id == wallets.c.tenant_id))
            .where(wallets.c.tenant_id == tenant_id)
        )
    ).first()
    if row is None:
        return None, tenant_id
    return row[0], str(row[1])


async def _remember(conn: AsyncConnection, event_id: str, kind: str) -> bool:
    """Keep the event by id; False when it was handled before (a redelivery). An event
    kept but never finished (its handler failed) is handled again: crediting is once per
    order whatever happens."""
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(events)
    added = await conn.execute(
        insert.values(id=event_id, type=kind[:100], received_at=utcnow())
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(events.c.id)
    )
    if added.first() is not None:
        return True
    processed = await conn.scalar(select(events.c.processed_at).where(events.c.id == event_id))
    return processed is None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None

"""Disputes and refunds to the card on SQLite and PostgreSQL, against the fake Stripe server:
a dispute's events (handled as Stripe's API shows the dispute) hold, then debit or release,
once each however often they come; a refund to the card is made once per id, never past what
the payment has left after disputes, and a refund Stripe refuses is given back. The wallet
equals its ledger after each."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import card_refunds, ledger
from llmrelay.billing.errors import PaymentProviderError
from llmrelay.billing.payments import Payments
from llmrelay.billing.reconcile import reconcile
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models_billing import LedgerEntry
from tests.support.fake_stripe import FakeStripe, stripe_config

SEALER = Sealer("disputes-tests-secret-key-0123456789abcdef")
USD = 1_000_000


@pytest.fixture
async def payments(engine: AsyncEngine, fake_stripe: FakeStripe) -> AsyncIterator[Payments]:
    made = Payments.from_config(engine, SEALER, stripe_config(fake_stripe))
    yield made
    await made.close()


async def _paid(payments: Payments, fake: FakeStripe, usd: int) -> tuple[str, str, str]:
    """(tenant, order id, payment intent id) of a paid and credited Checkout top-up."""
    async with session_factory(payments.engine).begin() as session:
        tenant = (await ensure_default_tenant(session)).id
    checkout = await payments.start_checkout(tenant, usd * USD, created_by="test")
    completed = fake.pay_session(checkout.session_id)
    assert await payments.handle_event(completed) == "credited"
    intent = fake.sessions[checkout.session_id]["payment_intent"]
    return tenant, checkout.order.id, intent


async def _balanced(engine: AsyncEngine, tenant: str) -> tuple[int, int]:
    async with engine.connect() as conn:
        sums = (
            await conn.execute(
                select(
                    func.sum(LedgerEntry.amount_micros), func.sum(LedgerEntry.reserved_delta_micros)
                ).where(LedgerEntry.tenant_id == tenant)
            )
        ).one()
        wallet = await ledger.balances(conn, tenant)
    assert (int(sums[0]), int(sums[1])) == wallet
    return wallet


async def test_a_dispute_is_held_then_lost_or_won_once(
    engine: AsyncEngine, payments: Payments, fake_stripe: FakeStripe
) -> None:
    tenant, _order, intent = await _paid(payments, fake_stripe, 20)
    start = await _balanced(engine, tenant)
    opened = fake_stripe.open_dispute(intent, amount=1200)
    assert await payments.handle_event(opened) == "held"
    assert await payments.handle_event(opened) == "duplicate"
    assert await _balanced(engine, tenant) == (start[0] - 12 * USD, start[1] + 12 * USD)
    closed = fake_stripe.close_dispute(opened["data"]["object"]["id"], won=False)
    assert await payments.handle_event(closed) == "lost"
    late = fake_stripe.event("charge.dispute.closed", closed["data"]["object"])
    assert await payments.handle_event(late) == "duplicate"
    assert await _balanced(engine, tenant) == (start[0] - 12 * USD, start[1])

    tenant, _order, intent = await _paid(payments, fake_stripe, 6)
    start = await _balanced(engine, tenant)
    opened = fake_stripe.open_dispute(intent)
    closed = fake_stripe.close_dispute(opened["data"]["object"]["id"], won=True)
    assert await payments.handle_event(closed) == "won"  # held and released at once
    assert await payments.handle_event(opened) == "duplicate"
    assert await _balanced(engine, tenant) == start


async def test_refunds_to_the_card_once_within_what_is_left(
    engine: AsyncEngine, payments: Payments, fake_stripe: FakeStripe
) -> None:
    tenant, order, intent = await _paid(payments, fake_stripe, 10)
    start = await _balanced(engine, tenant)
    made = await card_refunds.refund_to_card(
        payments, tenant, order, 4 * USD, "r1", reason="asked", actor="test"
    )
    assert (made.row.status, made.applied) == ("succeeded", True)
    again = await card_refunds.refund_to_card(
        payments, tenant, order, 4 * USD, "r1", reason="asked", actor="test"
    )
    assert (again.applied, again.row.stripe_refund_id) == (False, made.row.stripe_refund_id)
    with pytest.raises(card_refunds.RefundIdReused):
        await card_refunds.refund_to_card(
            payments, tenant, order, 5 * USD, "r1", reason="asked", actor="test"
        )
    opened = fake_stripe.open_dispute(intent, amount=300)
    assert await payments.handle_event(opened) == "held"
    with pytest.raises(card_refunds.InvalidRefund, match=r"\$3 left"):
        await card_refunds.refund_to_card(
            payments, tenant, order, 4 * USD, "r2", reason="asked", actor="test"
        )
    with pytest.raises(PaymentProviderError, match="charged back"):  # Stripe refuses it
        await card_refunds.refund_to_card(
            payments, tenant, order, 3 * USD, "r3", reason="asked", actor="test"
        )
    assert await _balanced(engine, tenant) == (start[0] - 4 * USD - 3 * USD, start[1] + 3 * USD)
    async with engine.connect() as conn:
        kinds = [
            row[0]
            for row in await conn.execute(
                select(LedgerEntry.kind)
                .where(LedgerEntry.order_id == order, LedgerEntry.kind != "topup")
                .order_by(LedgerEntry.id)
            )
        ]
    assert kinds == ["card_refund", "dispute_hold", "card_refund", "card_refund_reversal"]
    counts = await reconcile(payments, order_after_s=0, reservation_after_s=3600)
    assert counts["card_refunds"] == {}  # nothing left pending

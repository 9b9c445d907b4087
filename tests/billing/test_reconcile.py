"""The reconciliation job's work, on SQLite and PostgreSQL with the fake Stripe server: an
order whose webhook never came is completed from Stripe's API (credited once, even when run
again), a Checkout order that never reached Stripe is failed, an expired session expires its
order; reservations still held past the horizon are settled from their records by the live
rule (charged, released), or kept as metering_failed when no record exists, and settled
when its record lands later."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import Table, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import card_refunds, ledger, orders
from llmrelay.billing.charge import charge_known, charge_of
from llmrelay.billing.errors import PaymentProviderError
from llmrelay.billing.payments import Payments
from llmrelay.billing.reconcile import reconcile
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models import RequestRecord
from llmrelay.store.models_billing import LedgerEntry, PaymentOrder, Reservation, Wallet
from llmrelay.store.types import utcnow
from tests.support.fake_stripe import FakeStripe, stripe_config

SEALER = Sealer("reconcile-tests-secret-key-0123456789abcdef")


@pytest.fixture
async def payments(engine: AsyncEngine, fake_stripe: FakeStripe) -> AsyncIterator[Payments]:
    made = Payments.from_config(engine, SEALER, stripe_config(fake_stripe))
    yield made
    await made.close()


async def _tenant(engine: AsyncEngine) -> str:
    async with session_factory(engine).begin() as session:
        return (await ensure_default_tenant(session)).id


async def _order(engine: AsyncEngine, order_id: str) -> PaymentOrder:
    async with session_factory(engine)() as session:
        found = await session.get(PaymentOrder, order_id)
        assert found is not None
        return found


async def _reservations_and_wallet(
    engine: AsyncEngine,
) -> tuple[dict[str, tuple[str, int | None]], tuple[int, int]]:
    """Each reservation's (status, charged), and the wallet's (available, reserved)."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(Reservation.request_id, Reservation.status, Reservation.charged_micros)
            )
        ).all()
        wallet = (await conn.execute(select(Wallet.balance_micros, Wallet.reserved_micros))).one()
    return {r[0]: (r[1], r[2]) for r in rows}, (int(wallet[0]), int(wallet[1]))


async def test_orders_left_open_are_closed_from_stripe(
    engine: AsyncEngine, payments: Payments, fake_stripe: FakeStripe
) -> None:
    tenant = await _tenant(engine)
    paid = await payments.start_checkout(tenant, 12_000_000, created_by="test")
    fake_stripe.pay_session(paid.session_id)  # paid, but its webhook never came
    lapsed = await payments.start_checkout(tenant, 6_000_000, created_by="test")
    fake_stripe.sessions[lapsed.session_id]["status"] = "expired"
    open_one = await payments.start_checkout(tenant, 5_000_000, created_by="test")
    async with engine.begin() as conn:
        stranded = await orders.create(conn, tenant, orders.CHECKOUT, 8_000_000)
    recent = await reconcile(payments, order_after_s=3600, reservation_after_s=3600)
    assert recent["orders"] == {}  # nothing is old enough yet

    counts = await reconcile(payments, order_after_s=0, reservation_after_s=3600)
    assert counts["orders"] == {"credited": 1, "expired": 1, "failed": 1, "pending": 1}
    assert (await _order(engine, paid.order.id)).status == "paid"
    assert (await _order(engine, lapsed.order.id)).status == "expired"
    assert (await _order(engine, stranded.id)).status == "failed"
    assert (await _order(engine, open_one.order.id)).status == "pending"
    again = await reconcile(payments, order_after_s=0, reservation_after_s=3600)
    assert again["orders"] == {"pending": 1}
    async with engine.connect() as conn:
        wallet = (await conn.execute(select(Wallet.__table__))).one()
        topups = (
            await conn.execute(select(LedgerEntry.amount_micros).where(LedgerEntry.kind == "topup"))
        ).all()
    assert [t[0] for t in topups] == [12_000_000]
    assert wallet.balance_micros == 12_000_000
    assert wallet.payment_method_sealed is not None  # kept for auto top-ups
    method = orders.open_payment_method(SEALER, tenant, wallet.payment_method_sealed)
    assert method is not None and method.startswith("pm_")


async def test_reservations_left_held_are_settled_from_their_records(
    engine: AsyncEngine, payments: Payments
) -> None:
    tenant = await _tenant(engine)
    async with engine.begin() as conn:
        await ledger.ensure_wallet(conn, tenant)
        await ledger.credit(conn, tenant, 1_000_000, kind="topup", key="seed")
        for request_id in ("answered", "never-sent", "no-record", "young"):
            await ledger.reserve(conn, tenant, request_id, 100_000)
        old = utcnow() - timedelta(hours=2)
        await conn.execute(
            update(Reservation).where(Reservation.request_id != "young").values(created_at=old)
        )
        record = {
            "created_at": old,
            "tenant_id": tenant,
            "endpoint": "chat.completions",
            "latency_ms": 5.0,
            "price_source": "model",
        }
        await conn.execute(
            insert(RequestRecord),
            [
                record | {"request_id": "answered", "status_code": 200, "attempts": 1,
                          "usage_source": "reported", "cost_micros": 4_321},
                record | {"request_id": "never-sent", "status_code": 503, "attempts": 0,
                          "usage_source": "none", "cost_micros": 0},
            ],
        )  # fmt: skip
    counts = await reconcile(payments, order_after_s=3600, reservation_after_s=3600)
    assert counts["reservations"] == {"charged": 1, "released": 1, "metering_failed": 1}
    reservations, wallet = await _reservations_and_wallet(engine)
    assert reservations == {
        "answered": ("settled", 4_321),
        "never-sent": ("released", 0),
        "no-record": ("metering_failed", None),
        "young": ("held", None),  # may still be running
    }
    assert wallet == (1_000_000 - 4_321 - 200_000, 200_000)
    again = await reconcile(payments, order_after_s=3600, reservation_after_s=3600)
    assert again["reservations"] == {}  # nothing held is old enough any more


async def test_a_refund_to_the_card_left_pending_is_made_once(
    engine: AsyncEngine, payments: Payments, fake_stripe: FakeStripe
) -> None:
    """Stripe was unreachable when the refund was asked (its answer lost after it made the
    refund) and nobody asked again: the job asks with the same Idempotency-Key, Stripe
    answers the refund it made, and the wallet stays debited once."""
    tenant = await _tenant(engine)
    paid = await payments.start_checkout(tenant, 20_000_000, created_by="test")
    fake_stripe.pay_session(paid.session_id)
    await reconcile(payments, order_after_s=0, reservation_after_s=3600)  # credited
    fake_stripe.refund_outage = "after"
    try:
        with pytest.raises(PaymentProviderError):
            await card_refunds.refund_to_card(
                payments, tenant, paid.order.id, 7_000_000, "rf-1", reason="r", actor="test"
            )
    finally:
        fake_stripe.refund_outage = None
    recent = await reconcile(payments, order_after_s=3600, reservation_after_s=3600)
    assert recent["card_refunds"] == {}  # not old enough yet
    counts = await reconcile(payments, order_after_s=0, reservation_after_s=3600)
    assert counts["card_refunds"] == {"succeeded": 1}
    again = await reconcile(payments, order_after_s=0, reservation_after_s=3600)
    assert again["card_refunds"] == {}
    made = [r for r in fake_stripe.refunds.values() if r["metadata"]["order_id"] == paid.order.id]
    assert [r["amount"] for r in made] == [700]
    async with engine.connect() as conn:
        wallet = (await conn.execute(select(Wallet.__table__))).one()
        debits = (
            await conn.execute(
                select(LedgerEntry.amount_micros).where(LedgerEntry.kind == "card_refund")
            )
        ).all()
    assert [d[0] for d in debits] == [-7_000_000]
    assert wallet.balance_micros == 13_000_000


async def test_a_record_that_lands_after_the_reconciliation_settles_its_reservation(
    engine: AsyncEngine, payments: Payments
) -> None:
    """Kept as metering_failed because no record existed (a spooled record written after a
    database outage), then the record lands: the next run charges what it says, once; one
    whose record cannot say its cost (the client left, 499) stays for an operator."""
    tenant = await _tenant(engine)
    async with engine.begin() as conn:
        await ledger.ensure_wallet(conn, tenant)
        await ledger.credit(conn, tenant, 1_000_000, kind="topup", key="seed")
        for request_id in ("spooled", "left", "failed-call"):
            await ledger.reserve(conn, tenant, request_id, 100_000)
        old = utcnow() - timedelta(hours=2)
        await conn.execute(update(Reservation).values(created_at=old))
    first = await reconcile(payments, order_after_s=3600, reservation_after_s=3600)
    assert first["reservations"] == {"metering_failed": 3}
    assert first["late_records"] == {}
    record = {"created_at": old, "tenant_id": tenant, "endpoint": "chat.completions",
              "latency_ms": 5.0, "price_source": "model", "attempts": 1}  # fmt: skip
    async with engine.begin() as conn:
        await conn.execute(
            insert(RequestRecord),
            [
                record | {"request_id": "spooled", "status_code": 200,
                          "usage_source": "reported", "cost_micros": 4_321},
                record | {"request_id": "left", "status_code": 499,
                          "usage_source": "none", "cost_micros": 0},
                record | {"request_id": "failed-call", "status_code": 502,
                          "usage_source": "none", "cost_micros": 0},
            ],
        )  # fmt: skip
    second = await reconcile(payments, order_after_s=3600, reservation_after_s=3600)
    assert second["late_records"] == {"charged": 1, "released": 1}
    reservations, wallet = await _reservations_and_wallet(engine)
    assert reservations == {
        "spooled": ("settled", 4_321),
        "failed-call": ("released", 0),
        "left": ("metering_failed", None),  # the provider may have billed: an operator's
    }
    assert wallet == (1_000_000 - 4_321 - 100_000, 100_000)
    third = await reconcile(payments, order_after_s=3600, reservation_after_s=3600)
    assert third["late_records"] == {}  # settled once; the unknown one not read again


async def test_the_query_of_late_records_follows_the_charge_rule(engine: AsyncEngine) -> None:
    """charge_known (SQL) selects exactly the records charge_of can charge."""
    combos = list(
        itertools.product((200, 499, 502, 504), (0, 1), ("none", "estimated", "reported"),
                          (None, "unknown", "model"))
    )  # fmt: skip
    rows = [
        {"request_id": f"c{n}", "created_at": utcnow(), "endpoint": "chat.completions",
         "latency_ms": 1.0, "status_code": s, "attempts": a, "usage_source": u,
         "cost_micros": 7, "price_source": p}
        for n, (s, a, u, p) in enumerate(combos)
    ]  # fmt: skip
    table: Table = RequestRecord.__table__  # type: ignore[assignment]
    async with engine.begin() as conn:
        await conn.execute(insert(RequestRecord), rows)
        known = set(
            (await conn.execute(select(table.c.request_id).where(charge_known(table)))).scalars()
        )
    expected = {
        f"c{n}" for n, (s, a, u, p) in enumerate(combos) if charge_of(s, a, u, 7, p) is not None
    }
    assert known == expected and 0 < len(known) < len(rows)

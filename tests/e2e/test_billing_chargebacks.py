"""Money going back to card holders, through a real gateway process and the fake Stripe API
server: a dispute's signed webhook holds the disputed amount, a lost one debits it, a won one
releases it, each once however often and in whatever order the events come, and never on the
event's word alone; a refund to the card goes through Stripe's refund API with an
Idempotency-Key, never exceeds what the payment has left (two racing refunds included), and
debits the wallet exactly once, through an outage that lost Stripe's answer too; a refund
Stripe refuses gives the debit back. The ledger balances after each."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.billing import ADMIN_TOKEN, BillingDb, admin, paid_top_up
from tests.support.fake_stripe import FakeStripe
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

USD = 1_000_000


@pytest.fixture(scope="module")
def stripe_server() -> Iterator[FakeStripe]:
    server = FakeStripe().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, stripe_server: FakeStripe, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
projects: [{{name: p}}]
"""
    env = {
        "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
        **stripe_server.gateway_env(),
    }
    for process in serving(tmp_path_factory.mktemp("chargebacks"), config, env=env):
        stripe_server.webhook_url = f"{process.url}/api/billing/stripe/webhook"
        yield process


@pytest.fixture(scope="module")
def db(gateway: GatewayProcess) -> BillingDb:
    return BillingDb(gateway.database_url)


@pytest.fixture(scope="module")
def api(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with admin(gateway.url) as client:
        yield client


@pytest.fixture(scope="module")
def tenant(db: BillingDb) -> str:
    return db.default_tenant()


def kinds(db: BillingDb, tenant: str, order_id: str) -> list[tuple[str, int, int]]:
    """The order's ledger entries after its top-up: (kind, available delta, reserved delta)."""
    return [
        (e["kind"], int(e["amount_micros"]), int(e["reserved_delta_micros"]))
        for e in db.entries(tenant)
        if e["order_id"] == order_id and e["kind"] != "topup"
    ]


def refund(
    api: httpx.Client, tenant: str, order_id: str, usd: str, refund_id: str
) -> httpx.Response:
    return api.post(
        f"/billing/{tenant}/orders/{order_id}/refund",
        json={"amount_usd": usd, "reason": "asked by the customer", "refund_id": refund_id},
    )


def test_a_lost_dispute_holds_then_debits_the_wallet_once(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    order = paid_top_up(api, stripe_server, tenant, "20")
    available, reserved = db.wallet(tenant)
    opened = stripe_server.open_dispute(order["stripe_payment_intent_id"], amount=1500)
    dispute_id = opened["data"]["object"]["id"]
    assert stripe_server.deliver(opened).json()["outcome"] == "held"
    assert stripe_server.deliver(opened).json()["outcome"] == "duplicate"
    assert db.wallet(tenant) == (available - 15 * USD, reserved + 15 * USD)
    # An event that says "lost" while Stripe's API says the dispute is open is not believed.
    forged = stripe_server.event(
        "charge.dispute.closed", {**opened["data"]["object"], "status": "lost"}
    )
    assert stripe_server.deliver(forged).json()["outcome"] == "duplicate"
    assert db.wallet(tenant) == (available - 15 * USD, reserved + 15 * USD)
    listed = api.get(f"/billing/{tenant}/disputes").json()["data"]
    assert [
        (d["id"], d["status"], d["amount_micros"]) for d in listed if d["id"] == dispute_id
    ] == [(dispute_id, "open", 15 * USD)]

    closed = stripe_server.close_dispute(dispute_id, won=False)
    assert stripe_server.deliver(closed).json()["outcome"] == "lost"
    assert stripe_server.deliver(closed).json()["outcome"] == "duplicate"
    again = stripe_server.event("charge.dispute.closed", closed["data"]["object"])
    assert stripe_server.deliver(again).json()["outcome"] == "duplicate"  # a new event id
    assert db.wallet(tenant) == (available - 15 * USD, reserved)
    assert kinds(db, tenant, order["id"]) == [
        ("dispute_hold", -15 * USD, 15 * USD),
        ("dispute_loss", 0, -15 * USD),
    ]
    shown = api.get(f"/billing/{tenant}/orders/{order['id']}").json()
    assert shown["disputed_micros"] == 15 * USD
    (row,) = [
        d for d in api.get(f"/billing/{tenant}/disputes").json()["data"] if d["id"] == dispute_id
    ]
    assert (row["status"], row["stripe_status"], row["reason"]) == ("lost", "lost", "fraudulent")
    db.assert_balanced(tenant)


def test_a_won_dispute_releases_the_hold(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    order = paid_top_up(api, stripe_server, tenant, "10")
    before = db.wallet(tenant)
    opened = stripe_server.open_dispute(order["stripe_payment_intent_id"])
    assert stripe_server.deliver(opened).json()["outcome"] == "held"
    assert db.wallet(tenant) == (before[0] - 10 * USD, before[1] + 10 * USD)
    closed = stripe_server.close_dispute(opened["data"]["object"]["id"], won=True)
    assert stripe_server.deliver(closed).json()["outcome"] == "won"
    assert db.wallet(tenant) == before
    assert kinds(db, tenant, order["id"]) == [
        ("dispute_hold", -10 * USD, 10 * USD),
        ("dispute_release", 10 * USD, -10 * USD),
    ]
    assert api.get(f"/billing/{tenant}/orders/{order['id']}").json()["disputed_micros"] == 0
    db.assert_balanced(tenant)


def test_a_dispute_first_seen_closed_is_held_and_closed_at_once(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    order = paid_top_up(api, stripe_server, tenant, "8")
    before = db.wallet(tenant)
    opened = stripe_server.open_dispute(order["stripe_payment_intent_id"], amount=300)
    closed = stripe_server.close_dispute(opened["data"]["object"]["id"], won=False)
    assert stripe_server.deliver(closed).json()["outcome"] == "lost"  # `created` was lost
    assert stripe_server.deliver(opened).json()["outcome"] == "duplicate"  # then came late
    assert db.wallet(tenant) == (before[0] - 3 * USD, before[1])
    assert kinds(db, tenant, order["id"]) == [
        ("dispute_hold", -3 * USD, 3 * USD),
        ("dispute_loss", 0, -3 * USD),
    ]
    db.assert_balanced(tenant)


def test_a_refund_to_the_card_is_made_once_and_never_exceeds_the_payment(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    order = paid_top_up(api, stripe_server, tenant, "30")
    available, _ = db.wallet(tenant)
    made = refund(api, tenant, order["id"], "10", "rf-card-1")
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["status"], body["applied"], body["amount_micros"]) == ("succeeded", True, 10 * USD)
    stripe_refund = stripe_server.refunds[body["stripe_refund_id"]]
    assert (stripe_refund["amount"], stripe_refund["payment_intent"]) == (
        1000,
        order["stripe_payment_intent_id"],
    )
    assert stripe_refund["metadata"]["order_id"] == order["id"]
    posted = [c for c in stripe_server.calls if c[1] == "/v1/refunds"]
    assert posted[-1][3] == f"refund:{body['id']}"  # the Idempotency-Key

    again = refund(api, tenant, order["id"], "10", "rf-card-1")
    assert again.status_code == 201, again.text
    assert (again.json()["applied"], again.json()["stripe_refund_id"]) == (
        False,
        body["stripe_refund_id"],
    )
    assert len([c for c in stripe_server.calls if c[1] == "/v1/refunds"]) == len(posted)
    assert refund(api, tenant, order["id"], "11", "rf-card-1").status_code == 409
    too_much = refund(api, tenant, order["id"], "20.01", "rf-card-2")
    assert too_much.status_code == 400, too_much.text
    assert too_much.json()["error"]["field"] == "amount_micros"
    assert "$20 left" in too_much.json()["error"]["message"]
    assert db.wallet(tenant)[0] == available - 10 * USD
    assert kinds(db, tenant, order["id"]) == [("card_refund", -10 * USD, 0)]

    # Two refunds racing for the last $20: one is made, the other refused.
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(lambda n: refund(api, tenant, order["id"], "15", f"rf-race-{n}"), (1, 2))
        )
    assert sorted(a.status_code for a in answers) == [201, 400], [a.text for a in answers]
    assert db.wallet(tenant)[0] == available - 25 * USD
    shown = api.get(f"/billing/{tenant}/orders/{order['id']}").json()
    assert shown["refunded_micros"] == 25 * USD
    charge = stripe_server.charges[
        stripe_server.intents[order["stripe_payment_intent_id"]]["latest_charge"]
    ]
    assert charge["amount_refunded"] == 2500
    db.assert_balanced(tenant)


def test_a_refund_whose_answer_was_lost_is_made_and_debited_once(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    order = paid_top_up(api, stripe_server, tenant, "12")
    available, _ = db.wallet(tenant)
    stripe_server.refund_outage = "after"  # Stripe makes the refund; its answer is lost
    try:
        first = refund(api, tenant, order["id"], "5", "rf-outage")
        assert first.status_code == 503, first.text
        assert "same refund_id" in first.json()["error"]["message"]
        assert refund(api, tenant, order["id"], "5", "rf-outage").status_code == 503
        assert db.wallet(tenant)[0] == available - 5 * USD  # debited once, held as pending
    finally:
        stripe_server.refund_outage = None
    done = refund(api, tenant, order["id"], "5", "rf-outage")
    assert done.status_code == 201, done.text
    assert (done.json()["status"], done.json()["applied"]) == ("succeeded", False)
    made_at_stripe = [
        r for r in stripe_server.refunds.values() if r["metadata"].get("refund_id") == "rf-outage"
    ]
    assert len(made_at_stripe) == 1 and made_at_stripe[0]["id"] == done.json()["stripe_refund_id"]
    assert db.wallet(tenant)[0] == available - 5 * USD
    assert kinds(db, tenant, order["id"]) == [("card_refund", -5 * USD, 0)]
    db.assert_balanced(tenant)


def test_a_refund_stripe_refuses_gives_the_debit_back(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    order = paid_top_up(api, stripe_server, tenant, "20")
    opened = stripe_server.open_dispute(order["stripe_payment_intent_id"], amount=500)
    assert stripe_server.deliver(opened).json()["outcome"] == "held"
    available, reserved = db.wallet(tenant)
    # $15 is left after the $5 disputed, but Stripe refuses refunds of a disputed charge.
    refused = refund(api, tenant, order["id"], "15", "rf-disputed")
    assert refused.status_code == 502, refused.text
    assert "charged back" in refused.json()["error"]["message"]
    assert db.wallet(tenant) == (available, reserved)
    assert kinds(db, tenant, order["id"]) == [
        ("dispute_hold", -5 * USD, 5 * USD),
        ("card_refund", -15 * USD, 0),
        ("card_refund_reversal", 15 * USD, 0),
    ]
    assert api.get(f"/billing/{tenant}/orders/{order['id']}").json()["refunded_micros"] == 0
    again = refund(api, tenant, order["id"], "15", "rf-disputed")
    assert again.status_code == 201 and again.json()["status"] == "failed"  # nothing moves
    assert db.wallet(tenant) == (available, reserved)
    over = refund(api, tenant, order["id"], "15.01", "rf-over-disputed")
    assert over.status_code == 400  # the disputed $5 is not refunded again
    db.assert_balanced(tenant)


def test_a_dispute_of_money_already_spent_takes_the_balance_below_zero(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    """The bank has the money back already: the hold is never refused, and the tenant's
    available balance goes negative (its prepaid requests then get 402)."""
    order = paid_top_up(api, stripe_server, tenant, "10")
    available, reserved = db.wallet(tenant)
    spent = api.post(
        f"/billing/{tenant}/adjustments",
        json={"amount_micros": -(available - 2 * USD), "reason": "spent", "adjustment_id": "spent"},
    )
    assert spent.status_code == 201, spent.text
    opened = stripe_server.open_dispute(order["stripe_payment_intent_id"])
    assert stripe_server.deliver(opened).json()["outcome"] == "held"
    assert db.wallet(tenant) == (-8 * USD, reserved + 10 * USD)
    refused = refund(api, tenant, order["id"], "1", "rf-after-dispute")
    assert refused.status_code == 400  # nothing of the payment is left to refund
    db.assert_balanced(tenant)
    back = api.post(  # the other tests of the module find the balance they would have found
        f"/billing/{tenant}/adjustments",
        json={"amount_micros": available + 8 * USD, "reason": "back", "adjustment_id": "back"},
    )
    assert back.status_code == 201, back.text
    assert db.wallet(tenant)[0] == available

"""Stripe top-ups through a real gateway process and the fake Stripe API server: a Checkout
top-up is credited once by its signed webhook (redelivered: still once); a bad signature, a
stale timestamp or a changed body is refused with 400 and nothing is stored or credited; a
paid session whose amount, currency or session does not match its order is recorded and not
credited; under the auto top-up threshold the saved card is charged off-session and credited
by its own webhook."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.billing import ADMIN_TOKEN, BillingDb, admin, eventually, paid_top_up
from tests.support.fake_stripe import FakeStripe
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "billing-stripe-key-0123456789"


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
    pricing: {{input_per_mtok: 1000, output_per_mtok: 2000}}
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    env = {
        "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
        **stripe_server.gateway_env(),
        "LLMRELAY_JOBS_POLL_S": "0.2",
    }
    for process in serving(tmp_path_factory.mktemp("stripe"), config, env=env):
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


def checkout(api: httpx.Client, tenant: str, usd: str) -> dict[str, Any]:
    answer = api.post(f"/billing/{tenant}/checkout", json={"amount_usd": usd})
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


def event_outcome(db: BillingDb, event_id: str) -> str | None:
    found = db.rows("SELECT outcome FROM stripe_events WHERE id = $1", event_id)
    return found[0]["outcome"] if found else None


def test_a_checkout_top_up_is_credited_once(
    api: httpx.Client, db: BillingDb, tenant: str, stripe_server: FakeStripe
) -> None:
    balance_before = db.wallet(tenant)[0]  # other tests of the module may have paid first
    order = checkout(api, tenant, "20")
    assert (order["status"], order["kind"], order["amount_micros"]) == (
        "pending",
        "checkout",
        20_000_000,
    )
    assert order["checkout_url"].startswith(stripe_server.base_url)
    created = [c for c in stripe_server.calls if c[1] == "/v1/checkout/sessions"]
    assert created[-1][3] == order["id"]  # the order id is the Idempotency-Key
    completed = stripe_server.pay_session(order["stripe_session_id"])
    first = stripe_server.deliver(completed)
    assert (first.status_code, first.json()["outcome"]) == (200, "credited")
    redelivered = stripe_server.deliver(completed)
    assert (redelivered.status_code, redelivered.json()["outcome"]) == (200, "duplicate")
    # Another event about the same payment (a new event id): still one credit.
    again = stripe_server.event(
        "checkout.session.async_payment_succeeded", completed["data"]["object"]
    )
    assert stripe_server.deliver(again).json()["outcome"] == "duplicate"
    topups = [
        e for e in db.entries(tenant) if e["kind"] == "topup" and e["order_id"] == order["id"]
    ]
    assert [e["amount_micros"] for e in topups] == [20_000_000]
    assert topups[0]["idempotency_key"] == f"topup:{order['id']}"
    wallet = api.get(f"/billing/{tenant}/wallet").json()
    assert wallet["balance_micros"] == balance_before + 20_000_000
    micros = wallet["balance_micros"]
    assert wallet["balance_usd"] == f"{micros // 1_000_000}.{micros % 1_000_000:06d}"
    assert wallet["payment_method_saved"] and wallet["stripe_customer_id"].startswith("cus_")
    paid = api.get(f"/billing/{tenant}/orders/{order['id']}").json()
    assert paid["status"] == "paid" and paid["paid_at"] is not None
    db.assert_balanced(tenant)


def test_deliveries_that_do_not_verify_are_refused(
    gateway: GatewayProcess,
    db: BillingDb,
    tenant: str,
    stripe_server: FakeStripe,
    api: httpx.Client,
) -> None:
    order = checkout(api, tenant, "7")
    completed = stripe_server.pay_session(order["stripe_session_id"])
    forged = stripe_server.deliver(completed, secret="whsec_not_the_endpoints")
    stale = stripe_server.deliver(completed, timestamp=int(time.time()) - 3600)
    tampered = stripe_server.deliver(completed, tamper=True)
    unsigned = httpx.post(stripe_server.webhook_url or "", content=b"{}", timeout=5)
    for answer in (forged, stale, tampered, unsigned):
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["type"] == "invalid_signature"
    assert "tolerance" in stale.json()["error"]["message"]
    assert event_outcome(db, completed["id"]) is None  # nothing stored
    # Nothing credited for the order (the wallet itself may move meanwhile: an earlier
    # test's requests settle under their lease in the background).
    assert [e for e in db.entries(tenant) if e["order_id"] == order["id"]] == []
    assert stripe_server.deliver(completed).json()["outcome"] == "credited"  # the real one


def test_a_payment_that_does_not_match_its_order_is_not_credited(
    db: BillingDb, tenant: str, stripe_server: FakeStripe, api: httpx.Client
) -> None:
    short = checkout(api, tenant, "10")
    underpaid = stripe_server.pay_session(short["stripe_session_id"], amount=500)
    euros = checkout(api, tenant, "10")
    stripe_server.sessions[euros["stripe_session_id"]]["currency"] = "eur"
    in_euros = stripe_server.pay_session(euros["stripe_session_id"])
    victim, other = checkout(api, tenant, "10"), checkout(api, tenant, "10")
    stripe_server.pay_session(other["stripe_session_id"])
    swapped_object = dict(stripe_server.sessions[other["stripe_session_id"]])
    swapped_object["metadata"] = {"order_id": victim["id"], "tenant_id": tenant}
    swapped_object.pop("payment_intent_data", None)
    swapped = stripe_server.event("checkout.session.completed", swapped_object)
    for event, differs in (
        (underpaid, "amount 500"),
        (in_euros, "currency 'eur'"),
        (swapped, "is not the order's"),
    ):
        answer = stripe_server.deliver(event)
        assert (answer.status_code, answer.json()["outcome"]) == (200, "mismatch")
        stored = db.rows("SELECT outcome, detail FROM stripe_events WHERE id = $1", event["id"])[0]
        assert stored["outcome"] == "mismatch" and differs in stored["detail"]
    # Nothing credited for any of the orders (the wallet itself may move meanwhile: an
    # earlier test's requests settle under their lease in the background).
    orders = {short["id"], euros["id"], victim["id"], other["id"]}
    assert [e for e in db.entries(tenant) if e["order_id"] in orders] == []
    for order in (short, euros, victim):
        found = api.get(f"/billing/{tenant}/orders/{order['id']}").json()
        assert found["status"] == "pending" and found["failure"].startswith("re-check failed")


def test_auto_top_up_charges_the_saved_card_under_the_threshold(
    gateway: GatewayProcess,
    db: BillingDb,
    tenant: str,
    stripe_server: FakeStripe,
    api: httpx.Client,
) -> None:
    if not api.get(f"/billing/{tenant}/wallet").json()["payment_method_saved"]:
        paid_top_up(api, stripe_server, tenant, "5")  # saves the card (tests run in any order)
    balance = db.wallet(tenant)[0]
    settings = {
        "prepaid": True,
        "auto_topup_enabled": True,
        "auto_topup_threshold_micros": balance + 1,  # the next charge crosses it
        "auto_topup_amount_usd": "15",
    }
    read = api.get(f"/billing/{tenant}/wallet")
    stale = api.patch(f"/billing/{tenant}/wallet", json=settings, headers={"If-Match": '"s-0"'})
    assert stale.status_code == 409
    changed = api.patch(
        f"/billing/{tenant}/wallet", json=settings, headers={"If-Match": read.headers["ETag"]}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["auto_topup_amount_micros"] == 15_000_000
    assert changed.headers["ETag"] != read.headers["ETag"]

    # Under a wallet lease a request's reservation row is written with its settle, in the
    # next batch (within a second or so): every request sent is looked for until one has it.
    sent: list[str] = []

    def served() -> str | None:
        answer = httpx.post(
            f"{gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json={
                "model": "chat",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
            },
            timeout=10,
        )
        sent.append(answer.headers["x-request-id"])
        return next((r for r in sent if db.reservation(r) is not None), None)

    eventually(served, what="the tenant to be prepaid")
    order = eventually(
        lambda: next(iter(db.rows(
            "SELECT * FROM payment_orders WHERE kind = 'auto_topup' AND status = 'paid'")), None),
        timeout_s=20,
        what="the automatic top-up to be paid and credited",
    )  # fmt: skip
    assert order["amount_micros"] == 15_000_000
    intents = [c for c in stripe_server.calls if c[1] == "/v1/payment_intents"]
    assert intents[0][3] == order["id"]  # the order id is the Idempotency-Key
    assert intents[0][2]["off_session"] == "true" and intents[0][2]["payment_method"].startswith(
        "pm_"
    )
    credited = [e for e in db.entries(tenant) if e["order_id"] == order["id"]]
    assert [(e["kind"], e["amount_micros"]) for e in credited] == [("topup", 15_000_000)]
    off = api.patch(
        f"/billing/{tenant}/wallet", json={"auto_topup_enabled": False}, headers={"If-Match": "*"}
    )
    assert off.status_code == 200
    db.assert_balanced(tenant)

"""The Stripe calls through the official SDK against the fake Stripe server over loopback:
idempotent creates, reads, an off-session payment and its decline, and the SDK's webhook
signature verification (good, another secret, a stale timestamp, a changed body)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import pytest

from llmrelay.billing.errors import InvalidWebhook, PaymentProviderError
from llmrelay.billing.stripe_api import StripeApi
from tests.support.fake_stripe import FakeStripe, sign, stripe_config


@pytest.fixture
async def api(fake_stripe: FakeStripe) -> AsyncIterator[StripeApi]:
    client = StripeApi(stripe_config(fake_stripe))
    yield client
    await client.close()


async def test_checkout_session_is_made_once_per_order(
    api: StripeApi, fake_stripe: FakeStripe
) -> None:
    customer = await api.create_customer("tenant-1", "Acme")
    assert customer == await api.create_customer("tenant-1", "Acme")  # one per tenant
    first = await api.create_checkout_session("order-1", "tenant-1", 12_340_000, customer)
    again = await api.create_checkout_session("order-1", "tenant-1", 12_340_000, customer)
    assert first["id"] == again["id"]
    assert (first["amount_total"], first["currency"], first["mode"]) == (1234, "usd", "payment")
    assert first["metadata"] == {"order_id": "order-1", "tenant_id": "tenant-1"}
    assert first["client_reference_id"] == "order-1"
    sent = [c for c in fake_stripe.calls if c[1] == "/v1/checkout/sessions"]
    assert {c[3] for c in sent} == {"order-1"}  # the order id is the Idempotency-Key
    assert sent[0][2]["payment_intent_data"]["setup_future_usage"] == "off_session"
    read = await api.retrieve_session(first["id"])
    assert (read["status"], read["payment_status"]) == ("open", "unpaid")
    assert (await api.expire_session(first["id"]))["status"] == "expired"
    with pytest.raises(PaymentProviderError, match=r"No such checkout\.session") as missing:
        await api.retrieve_session("cs_test_nope")
    assert not missing.value.retryable


async def test_an_off_session_payment_and_a_declined_one(
    api: StripeApi, fake_stripe: FakeStripe
) -> None:
    paid = await api.create_off_session_payment("order-2", "t", 20_000_000, "cus_x", "pm_ok")
    assert (paid["status"], paid["amount_received"]) == ("succeeded", 2000)
    assert (await api.retrieve_intent(paid["id"]))["metadata"]["order_id"] == "order-2"
    fake_stripe.declined.add("pm_bad")
    with pytest.raises(PaymentProviderError, match="declined") as declined:
        await api.create_off_session_payment("order-3", "t", 20_000_000, "cus_x", "pm_bad")
    assert not declined.value.retryable


async def test_webhook_signatures_are_verified(api: StripeApi, fake_stripe: FakeStripe) -> None:
    payload = orjson.dumps(fake_stripe.event("checkout.session.completed", {"id": "cs_1"}))
    event = api.verify_event(payload, sign(payload, fake_stripe.webhook_secret))
    assert event["type"] == "checkout.session.completed"
    with pytest.raises(InvalidWebhook, match="No signatures found matching"):
        api.verify_event(payload, sign(payload, "whsec_someone_else"))
    stale = int(time.time()) - 301
    with pytest.raises(InvalidWebhook, match="tolerance"):
        api.verify_event(payload, sign(payload, fake_stripe.webhook_secret, stale))
    with pytest.raises(InvalidWebhook):
        api.verify_event(payload + b" ", sign(payload, fake_stripe.webhook_secret))
    with pytest.raises(InvalidWebhook, match="No Stripe-Signature"):
        api.verify_event(payload, None)

"""A fake Stripe API server for the billing tests of a module, and the config to reach it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmrelay.billing.stripe_config import StripeConfig
from tests.support.fake_stripe import FakeStripe


@pytest.fixture(scope="module")
def fake_stripe() -> Iterator[FakeStripe]:
    server = FakeStripe().start()
    yield server
    server.stop()


def stripe_config(fake: FakeStripe, **overrides: object) -> StripeConfig:
    values: dict[str, object] = {
        "secret_key": fake.secret_key,
        "webhook_secret": fake.webhook_secret,
        "api_base": fake.base_url,
        "success_url": "https://console.example.com/billing/done",
        "cancel_url": "https://console.example.com/billing/cancelled",
        "min_topup_micros": 5_000_000,
        "max_topup_micros": 1_000_000_000,
    }
    values.update(overrides)
    return StripeConfig(**values)  # type: ignore[arg-type]

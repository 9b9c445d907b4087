"""Stripe's settings as the billing code uses them, and amounts in Stripe's unit (cents).
Apart from stripe_api.py so that a process without Stripe never imports the SDK (a third of
a second at start)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from llmrelay.settings import Settings

#: Micro-USD in one cent: Stripe amounts are cents, wallet amounts micro-USD.
MICROS_PER_CENT = 10_000
#: What a Checkout top-up is called on Stripe's page and receipts.
PRODUCT_NAME = "Prepaid balance top-up"


@dataclass(frozen=True, slots=True)
class StripeConfig:
    secret_key: str
    webhook_secret: str | None
    api_base: str
    success_url: str | None
    cancel_url: str | None
    min_topup_micros: int
    max_topup_micros: int
    webhook_tolerance_s: int = 300
    currency: str = "usd"

    @classmethod
    def from_settings(cls, settings: Settings) -> StripeConfig | None:
        """None when no secret key is set (top-ups are off)."""
        if not settings.stripe_secret_key:
            return None
        return cls(
            secret_key=settings.stripe_secret_key,
            webhook_secret=settings.stripe_webhook_secret,
            api_base=settings.stripe_api_base.rstrip("/"),
            success_url=settings.stripe_success_url,
            cancel_url=settings.stripe_cancel_url,
            min_topup_micros=usd_micros(settings.stripe_min_topup_usd),
            max_topup_micros=usd_micros(settings.stripe_max_topup_usd),
            webhook_tolerance_s=settings.stripe_webhook_tolerance_s,
        )


def usd_micros(value: Decimal) -> int:
    return int(value * 1_000_000)


def cents(micros: int) -> int:
    """Stripe's amount for a wallet amount (a whole number of cents: checked before)."""
    return micros // MICROS_PER_CENT

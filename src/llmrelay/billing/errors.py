"""The billing exception tree: every refusal or failure of a money movement, a reservation or
a payment is a BillingError whose message says why. The data plane maps the ones a request can
meet to its protocol's errors in one place (gateway/prepaid.py); the admin API maps them to
its error body (admin/billing/service.py)."""

from __future__ import annotations


def usd(micros: int) -> str:
    """Micro-USD as a person reads it: `$1.5`, `$0.000123`, `-$2`."""
    sign = "-" if micros < 0 else ""
    text = f"{abs(micros) / 1_000_000:,.6f}".rstrip("0").rstrip(".")
    return f"{sign}${text}"


class BillingError(Exception):
    """A money movement that cannot be made; the message says why."""


class InsufficientBalance(BillingError):
    """The wallet's available balance cannot cover the amount (402 on the data plane)."""

    def __init__(self, needed: int, available: int) -> None:
        super().__init__(
            f"the prepaid balance ({usd(available)}) cannot cover this request's "
            f"reservation ({usd(needed)}): top up the wallet"
        )
        self.needed = needed
        self.available = available


class NoWallet(BillingError):
    """The tenant has no wallet."""


class Unpriced(BillingError):
    """A prepaid request could reach a route with no known price: it cannot be reserved for
    (nor charged), so it is refused unless LLMRELAY_BILLING_UNPRICED_RESERVE_MICROS is set."""

    def __init__(self, model: str, upstream_model: str, provider: str) -> None:
        super().__init__(
            f"model {model!r} has no price for its route to {provider!r} ({upstream_model!r}), "
            "so a prepaid request cannot be reserved for: give the model or the route a price"
        )
        self.model = model


class RequestIdUsed(BillingError):
    """A reservation for this request id was made before (by an earlier request)."""

    def __init__(self, request_id: str) -> None:
        super().__init__(
            f"the request id {request_id!r} was already used by a billed request: "
            "send a new X-Request-ID (or none)"
        )


class LedgerUnavailable(BillingError):
    """The database could not be reached (or did not answer in time) for a reservation."""


class PaymentsNotConfigured(BillingError):
    """Stripe is not set up (LLMRELAY_STRIPE_SECRET_KEY and friends)."""


class PaymentProviderError(BillingError):
    """Stripe refused a call or could not be reached; the message is Stripe's, without
    secrets."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class InvalidWebhook(BillingError):
    """A webhook delivery whose signature (or signed timestamp) does not verify, or whose
    body is not a Stripe event: answered 400, nothing stored."""

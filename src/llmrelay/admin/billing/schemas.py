"""Billing bodies. Every amount is integer micro-USD (`*_micros`) with a display string in
USD (`*_usd`, exact: six decimals); an input amount is given as one of the two."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmrelay.admin.kit.params import PRINTABLE

#: A client's idempotency id (a refund's, an adjustment's).
IDEMPOTENCY_ID = r"^[A-Za-z0-9_.:-]{1,100}$"


def usd(micros: int | None) -> str | None:
    """Exact USD with six decimals: 1500000 -> "1.500000"."""
    if micros is None:
        return None
    sign = "-" if micros < 0 else ""
    whole, part = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{part:06d}"


def micros_of(value: Decimal) -> int:
    """USD to micro-USD; more than six decimals is refused (no rounding of money)."""
    scaled = value * 1_000_000
    if scaled != scaled.to_integral_value():
        raise ValueError("USD amounts have at most six decimals (micro-USD)")
    return int(scaled)


class _Amount(BaseModel):
    """An amount as `amount_micros` or `amount_usd` (exactly one)."""

    model_config = ConfigDict(extra="forbid")

    amount_micros: int | None = Field(default=None, description="micro-USD")
    amount_usd: Decimal | None = Field(default=None, description="USD, up to six decimals")

    @model_validator(mode="after")
    def _one_amount(self) -> _Amount:
        if (self.amount_micros is None) == (self.amount_usd is None):
            raise ValueError("give the amount as amount_micros or amount_usd (one of them)")
        if self.amount_micros is None and self.amount_usd is not None:
            self.amount_micros = micros_of(self.amount_usd)
        return self

    @property
    def micros(self) -> int:
        assert self.amount_micros is not None
        return self.amount_micros


class WalletPatch(BaseModel):
    """Only the fields sent change. Threshold and amount as micros or USD (not both)."""

    model_config = ConfigDict(extra="forbid")

    prepaid: bool | None = Field(
        default=None, description="enforce the balance: reserve before each request, 402 if short"
    )
    auto_topup_enabled: bool | None = None
    auto_topup_threshold_micros: int | None = Field(default=None, ge=0)
    auto_topup_threshold_usd: Decimal | None = Field(default=None, ge=0)
    auto_topup_amount_micros: int | None = Field(default=None, gt=0)
    auto_topup_amount_usd: Decimal | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_unit(self) -> WalletPatch:
        for name in ("auto_topup_threshold", "auto_topup_amount"):
            micros, dollars = getattr(self, f"{name}_micros"), getattr(self, f"{name}_usd")
            if micros is not None and dollars is not None:
                raise ValueError(f"give {name} as {name}_micros or {name}_usd, not both")
            if dollars is not None:
                setattr(self, f"{name}_micros", micros_of(dollars))
        return self

    def changes(self) -> dict[str, Any]:
        """The wallet columns sent (micros)."""
        names = (
            "prepaid",
            "auto_topup_enabled",
            "auto_topup_threshold_micros",
            "auto_topup_amount_micros",
        )
        return {n: getattr(self, n) for n in names if n in self._sent()}

    def _sent(self) -> set[str]:
        sent = set(self.model_fields_set)
        for name in ("auto_topup_threshold", "auto_topup_amount"):
            if f"{name}_usd" in sent:
                sent.add(f"{name}_micros")
        return sent


class WalletOut(BaseModel):
    tenant_id: str
    #: False when the tenant has no wallet yet (all zero, not prepaid).
    exists: bool
    prepaid: bool
    currency: str
    balance_micros: int = Field(description="available: what can still be reserved")
    balance_usd: str
    reserved_micros: int = Field(description="frozen for requests in flight or unreconciled")
    reserved_usd: str
    auto_topup_enabled: bool
    auto_topup_threshold_micros: int | None
    auto_topup_threshold_usd: str | None
    auto_topup_amount_micros: int | None
    auto_topup_amount_usd: str | None
    payment_method_saved: bool
    stripe_customer_id: str | None
    updated_at: datetime | None


class LedgerEntryOut(BaseModel):
    id: int
    kind: str
    amount_micros: int
    amount_usd: str
    reserved_delta_micros: int
    balance_after_micros: int
    balance_after_usd: str
    reserved_after_micros: int
    request_id: str | None
    order_id: str | None
    actor: str | None
    note: str | None
    created_at: datetime


class LedgerPage(BaseModel):
    data: list[LedgerEntryOut]
    next_cursor: str | None


class ReservationOut(BaseModel):
    request_id: str
    project_id: str | None
    key_id: str | None
    status: str
    amount_micros: int
    amount_usd: str
    charged_micros: int | None
    charged_usd: str | None
    created_at: datetime
    settled_at: datetime | None


class ReservationPage(BaseModel):
    data: list[ReservationOut]
    next_cursor: str | None


class ReconcileIn(BaseModel):
    """The cost to settle a reservation whose metering failed with (0 releases it all)."""

    model_config = ConfigDict(extra="forbid")

    cost_micros: int | None = Field(default=None, ge=0)
    cost_usd: Decimal | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_cost(self) -> ReconcileIn:
        if (self.cost_micros is None) == (self.cost_usd is None):
            raise ValueError("give the cost as cost_micros or cost_usd (one of them)")
        if self.cost_usd is not None:
            self.cost_micros = micros_of(self.cost_usd)
        return self


class RefundIn(_Amount):
    """Money given back to the wallet. At most once per `refund_id` (or the request's
    Idempotency-Key header): the same id again changes nothing."""

    amount_micros: int | None = Field(default=None, gt=0)
    amount_usd: Decimal | None = Field(default=None, gt=0)
    reason: str = Field(min_length=1, max_length=500, pattern=PRINTABLE)
    refund_id: str | None = Field(default=None, pattern=IDEMPOTENCY_ID)
    request_id: str | None = Field(default=None, min_length=1, max_length=64)
    order_id: str | None = Field(default=None, min_length=1, max_length=32)


class AdjustmentIn(_Amount):
    """A manual correction (platform admins only): positive adds, negative takes away (never
    below zero). At most once per `adjustment_id` (or Idempotency-Key)."""

    reason: str = Field(min_length=1, max_length=500, pattern=PRINTABLE)
    adjustment_id: str | None = Field(default=None, pattern=IDEMPOTENCY_ID)


class MovementOut(BaseModel):
    """A refund or adjustment: `applied` false when its id had been used (nothing changed)."""

    id: str
    tenant_id: str
    kind: str
    amount_micros: int
    amount_usd: str
    applied: bool
    balance_micros: int
    balance_usd: str


class OrderOut(BaseModel):
    id: str
    tenant_id: str
    kind: str
    status: str
    amount_micros: int
    amount_usd: str
    currency: str
    checkout_url: str | None
    stripe_session_id: str | None
    stripe_payment_intent_id: str | None
    failure: str | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    paid_at: datetime | None
    #: Refunded to the card (refunds in flight included) and held or taken by disputes:
    #: a refund to the card never takes more than the rest.
    refunded_micros: int = 0
    disputed_micros: int = 0


class OrderPage(BaseModel):
    data: list[OrderOut]
    next_cursor: str | None


class CheckoutIn(_Amount):
    """A top-up paid on Stripe's Checkout page (between the LLMRELAY_STRIPE_MIN/MAX_TOPUP_USD
    bounds, whole cents)."""

    amount_micros: int | None = Field(default=None, gt=0)
    amount_usd: Decimal | None = Field(default=None, gt=0)


class CheckoutOut(OrderOut):
    """The new order; send the payer to `checkout_url`."""


class CardRefundIn(_Amount):
    """Part or all of a paid top-up sent back to its card through Stripe, taken from the
    wallet once. At most once per `refund_id` (or the request's Idempotency-Key header)."""

    amount_micros: int | None = Field(default=None, gt=0)
    amount_usd: Decimal | None = Field(default=None, gt=0)
    reason: str = Field(min_length=1, max_length=500, pattern=PRINTABLE)
    refund_id: str | None = Field(default=None, pattern=IDEMPOTENCY_ID)


class CardRefundOut(BaseModel):
    """A refund to the card: `pending` (Stripe not reached yet: ask again with the same
    id), `succeeded` (Stripe made it), `failed` (Stripe refused it; the wallet's debit was
    given back). `applied`: this call debited the wallet."""

    id: str
    refund_id: str
    tenant_id: str
    order_id: str
    amount_micros: int
    amount_usd: str
    status: str
    stripe_refund_id: str | None
    failure: str | None
    reason: str | None
    applied: bool
    balance_micros: int
    balance_usd: str
    created_at: datetime


class DisputeOut(BaseModel):
    """A chargeback of a top-up: `open` (its amount held), `won` (released), `lost`
    (taken from the wallet)."""

    id: str
    tenant_id: str
    order_id: str
    charge_id: str | None
    amount_micros: int
    amount_usd: str
    reason: str | None
    status: str
    stripe_status: str | None
    created_at: datetime
    closed_at: datetime | None


class DisputeList(BaseModel):
    data: list[DisputeOut]

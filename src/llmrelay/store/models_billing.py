"""Prepaid billing, payments, mail and account tokens (migration 0014). On store/models.py's
`Base`, so one metadata holds the whole schema.

Money is integer micro-USD. A wallet's balances change only through ledger entries written in
the same transaction (billing/ledger.py): the ledger is append-only and its idempotency keys
make every money movement happen at most once (a reserve per request id, a top-up per order).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base, new_id
from llmrelay.store.types import BigIntPK, JSONDoc, utcnow


class Wallet(Base):
    """A tenant's prepaid balance. `balance_micros` is what can still be reserved;
    `reserved_micros` is frozen for requests in flight (and for reservations whose metering
    failed, until reconciled). Both only move with a ledger entry in the same transaction."""

    __tablename__ = "wallets"

    tenant_id: Mapped[str] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    #: True: requests of the tenant's keys reserve before the provider call and get 402 when
    #: the balance cannot cover it. False: the wallet is kept but not enforced (postpaid).
    prepaid: Mapped[bool] = mapped_column(Boolean, default=True, server_default=false())
    balance_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    currency: Mapped[str] = mapped_column(String(3), default="usd")
    #: An alert mail goes out when the balance falls under this (None: no alert).
    low_balance_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: When the balance last fell under the threshold and was alerted (cleared on top-up).
    low_balance_alerted_at: Mapped[datetime | None]
    auto_topup_enabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    auto_topup_threshold_micros: Mapped[int | None] = mapped_column(BigInteger)
    auto_topup_amount_micros: Mapped[int | None] = mapped_column(BigInteger)
    stripe_customer_id: Mapped[str | None] = mapped_column(String(255))
    #: The saved payment method's id at Stripe, sealed (context = the tenant id).
    payment_method_sealed: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class LedgerEntry(Base):
    """One movement of a wallet's money; never updated or deleted."""

    __tablename__ = "ledger_entries"
    __table_args__ = (Index(None, "tenant_id", "id"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(32))
    #: topup, reserve, charge (a settled reservation's cost), release (its unused part),
    #: refund, adjustment, metering_failed (a reservation kept until reconciled),
    #: dispute_hold, dispute_release, dispute_loss, card_refund, card_refund_reversal
    kind: Mapped[str] = mapped_column(String(24))
    #: Signed changes to the wallet's available and reserved balances, and both after it.
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    reserved_delta_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    balance_after_micros: Mapped[int] = mapped_column(BigInteger)
    reserved_after_micros: Mapped[int] = mapped_column(BigInteger)
    request_id: Mapped[str | None] = mapped_column(String(64), index=True)
    order_id: Mapped[str | None] = mapped_column(String(32), index=True)
    #: Makes the movement happen once: `reserve:<request id>`, `settle:<request id>`,
    #: `topup:<order id>`, `refund:<...>`.
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    #: Who made a manual entry (an admin's id), and why.
    actor: Mapped[str | None] = mapped_column(String(100))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Reservation(Base):
    """The money frozen for one request, from admission until it is settled."""

    __tablename__ = "reservations"
    __table_args__ = (Index(None, "status", "created_at"),)

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    project_id: Mapped[str | None] = mapped_column(String(32))
    key_id: Mapped[str | None] = mapped_column(String(32))
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    #: What the request cost, once settled.
    charged_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: held, settled, released (nothing charged), metering_failed (kept until reconciled)
    status: Mapped[str] = mapped_column(String(16), default="held")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    settled_at: Mapped[datetime | None]
    #: The allowance it was admitted under (billing/allowance.py), or None: reserved by its
    #: own transaction. While that lease is open, a held row's money is the lease's (its
    #: owner settles it); once the lease is closed the row holds its amount itself.
    lease_id: Mapped[str | None] = mapped_column(String(32), index=True)


class WalletLease(Base):
    """A chunk of a wallet's available balance reserved by one process (migration 0029), so
    it admits prepaid requests against the remainder in memory, without a transaction each.

    The money in the lease is `granted_micros - consumed_micros` while it is `open`: granted
    by `lease` ledger entries (available -> reserved), consumed by the settles of the requests
    admitted under it (their cost, or their whole reservation when it is kept as
    `metering_failed`), given back by one `lease_return` entry when it is closed (by its
    owner, or by reconciliation once it has expired: its owner stopped renewing it)."""

    __tablename__ = "wallet_leases"
    __table_args__ = (Index(None, "status", "expires_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    #: The process holding it (host:pid), for operators.
    owner: Mapped[str] = mapped_column(String(100))
    granted_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    consumed_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    #: What its close gave back to available (signed: a cost above the lease takes more).
    returned_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: Grants so far (the idempotency key of the next `lease` entry).
    grants: Mapped[int] = mapped_column(Integer, default=0)
    #: open, closed
    status: Mapped[str] = mapped_column(String(8), default="open")
    #: Renewed by its owner while it lives; past it (and a grace) reconciliation closes it.
    expires_at: Mapped[datetime] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    closed_at: Mapped[datetime | None]


class PaymentOrder(Base):
    """A top-up: its id is the idempotency key of every Stripe call made for it."""

    __tablename__ = "payment_orders"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    #: checkout (a person paid on Stripe's page) or auto_topup (the saved payment method)
    kind: Mapped[str] = mapped_column(String(16))
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3), default="usd")
    #: created, pending, paid, failed, expired, refunded
    status: Mapped[str] = mapped_column(String(16), default="created")
    stripe_session_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    stripe_payment_intent_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    checkout_url: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(32))
    failure: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    paid_at: Mapped[datetime | None]
    #: Refunded to the card so far (refunds in flight included); with `disputed_micros`,
    #: never more than `amount_micros` (one conditional UPDATE decides: 0018).
    refunded_micros: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    #: Held by open disputes and taken by lost ones (a won dispute gives its part back).
    disputed_micros: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class Dispute(Base):
    """A chargeback of a top-up's payment (0018): its amount is held in the wallet while it
    is open, released when won, taken when lost; each by its ledger entry, once."""

    __tablename__ = "disputes"

    #: Stripe's dispute id (`dp_...` / `du_...`).
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    order_id: Mapped[str] = mapped_column(String(32), index=True)
    charge_id: Mapped[str | None] = mapped_column(String(255))
    #: What the wallet holds for it (the disputed amount, at most the order's).
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(String(64))
    #: open, won, lost
    status: Mapped[str] = mapped_column(String(16), default="open")
    #: Stripe's own status when last read (needs_response, under_review, won, lost, ...).
    stripe_status: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    closed_at: Mapped[datetime | None]


class CardRefund(Base):
    """Money sent back to the card of a top-up through Stripe's refund API (0018). The
    wallet is debited when the row is made, in the same transaction; a refusal by Stripe
    reverses it. The row id is the Idempotency-Key of the Stripe call."""

    __tablename__ = "card_refunds"
    __table_args__ = (UniqueConstraint("tenant_id", "refund_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(String(32))
    #: The caller's id (the body's `refund_id` or the Idempotency-Key header).
    refund_id: Mapped[str] = mapped_column(String(100))
    order_id: Mapped[str] = mapped_column(String(32), index=True)
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(Text)
    #: pending (asked of Stripe, or to be asked again), succeeded, failed (reversed)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    stripe_refund_id: Mapped[str | None] = mapped_column(String(255))
    failure: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class StripeEvent(Base):
    """A Stripe webhook event, kept by id so a redelivery is recognised."""

    __tablename__ = "stripe_events"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    type: Mapped[str] = mapped_column(String(100))
    order_id: Mapped[str | None] = mapped_column(String(32))
    #: What handling it did: credited, ignored, mismatch (a re-check failed), ...
    outcome: Mapped[str | None] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    processed_at: Mapped[datetime | None]


class EmailMessage(Base):
    """A mail waiting to be sent, or sent. The body is sealed (it can hold sign-in links);
    a job sends it over SMTP with retries."""

    __tablename__ = "email_outbox"
    __table_args__ = (Index(None, "status", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str | None] = mapped_column(String(32))
    #: invitation, verification, password_reset, low_balance, budget_alert, ...
    kind: Mapped[str] = mapped_column(String(32))
    to_address: Mapped[str] = mapped_column(String(320))
    subject: Mapped[str] = mapped_column(String(300))
    #: Sealed JSON {"text": ..., "html": ...} (context = the message id).
    body_sealed: Mapped[str] = mapped_column(Text)
    #: One mail per event (an alert per threshold crossing): unique when set.
    dedupe_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    #: pending, sent, failed
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None]


class AccountToken(Base):
    """A single-use link token for a user: an invitation, an email verification, a password
    reset. Only its SHA-256 digest is kept."""

    __tablename__ = "account_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    #: invitation, verification, password_reset
    purpose: Mapped[str] = mapped_column(String(24))
    token_digest: Mapped[str] = mapped_column(String(64), unique=True)
    #: What using it grants (an invitation's tenant and role), not secret.
    data: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

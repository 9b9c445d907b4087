"""prepaid billing: wallets, the ledger, reservations, payment orders, Stripe events; the
mail outbox and single-use account tokens; tenant preferences; pending (unverified) users

New tables, and nullable or defaulted columns on `tenants` and `users` (ALTER TABLE on SQLite:
no table copy).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import BigIntPK, JSONDoc, UTCDateTime

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("preferences", JSONDoc, nullable=True))
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("pending", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("email_verified_at", UTCDateTime(), nullable=True))

    op.create_table(
        "wallets",
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("prepaid", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("balance_micros", sa.BigInteger(), nullable=False),
        sa.Column("reserved_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("low_balance_micros", sa.BigInteger(), nullable=True),
        sa.Column("low_balance_alerted_at", UTCDateTime(), nullable=True),
        sa.Column("auto_topup_enabled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("auto_topup_threshold_micros", sa.BigInteger(), nullable=True),
        sa.Column("auto_topup_amount_micros", sa.BigInteger(), nullable=True),
        sa.Column("stripe_customer_id", sa.String(255), nullable=True),
        sa.Column("payment_method_sealed", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_wallets_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_wallets")),
    )
    op.create_table(
        "ledger_entries",
        sa.Column("id", BigIntPK, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("reserved_delta_micros", sa.BigInteger(), nullable=False),
        sa.Column("balance_after_micros", sa.BigInteger(), nullable=False),
        sa.Column("reserved_after_micros", sa.BigInteger(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("order_id", sa.String(32), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("actor", sa.String(100), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_ledger_entries_idempotency_key")),
    )
    op.create_index(op.f("ix_ledger_entries_tenant_id_id"), "ledger_entries", ["tenant_id", "id"])
    op.create_index(op.f("ix_ledger_entries_request_id"), "ledger_entries", ["request_id"])
    op.create_index(op.f("ix_ledger_entries_order_id"), "ledger_entries", ["order_id"])
    op.create_table(
        "reservations",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("project_id", sa.String(32), nullable=True),
        sa.Column("key_id", sa.String(32), nullable=True),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("charged_micros", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("settled_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_reservations")),
    )
    op.create_index(op.f("ix_reservations_tenant_id"), "reservations", ["tenant_id"])
    op.create_index(
        op.f("ix_reservations_status_created_at"), "reservations", ["status", "created_at"]
    )
    op.create_table(
        "payment_orders",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stripe_session_id", sa.String(255), nullable=True),
        sa.Column("stripe_payment_intent_id", sa.String(255), nullable=True),
        sa.Column("checkout_url", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(32), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("paid_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payment_orders")),
        sa.UniqueConstraint("stripe_session_id", name=op.f("uq_payment_orders_stripe_session_id")),
        sa.UniqueConstraint(
            "stripe_payment_intent_id", name=op.f("uq_payment_orders_stripe_payment_intent_id")
        ),
    )
    op.create_index(op.f("ix_payment_orders_tenant_id"), "payment_orders", ["tenant_id"])
    op.create_table(
        "stripe_events",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("order_id", sa.String(32), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.Column("processed_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stripe_events")),
    )
    op.create_table(
        "email_outbox",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("to_address", sa.String(320), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("body_sealed", sa.Text(), nullable=False),
        sa.Column("dedupe_key", sa.String(200), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_email_outbox")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_email_outbox_dedupe_key")),
    )
    op.create_index(
        op.f("ix_email_outbox_status_created_at"), "email_outbox", ["status", "created_at"]
    )
    op.create_table(
        "account_tokens",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("purpose", sa.String(24), nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("data", JSONDoc, nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_account_tokens_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_account_tokens")),
        sa.UniqueConstraint("token_digest", name=op.f("uq_account_tokens_token_digest")),
    )
    op.create_index(op.f("ix_account_tokens_user_id"), "account_tokens", ["user_id"])


def downgrade() -> None:
    for table in (
        "account_tokens",
        "email_outbox",
        "stripe_events",
        "payment_orders",
        "reservations",
        "ledger_entries",
        "wallets",
    ):
        op.drop_table(table)
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("email_verified_at")
        batch_op.drop_column("pending")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("preferences")

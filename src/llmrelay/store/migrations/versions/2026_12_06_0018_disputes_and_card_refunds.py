"""disputes and card refunds: Stripe chargebacks of top-ups (`disputes`, held while open,
released when won, taken when lost) and refunds to the card (`card_refunds`); each top-up
order counts what was refunded and disputed of it, so a refund never exceeds what its charge
has left.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import UTCDateTime

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("payment_orders", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("refunded_micros", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("disputed_micros", sa.BigInteger(), server_default="0", nullable=False)
        )
    op.create_table(
        "disputes",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("order_id", sa.String(32), nullable=False),
        sa.Column("charge_id", sa.String(255), nullable=True),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stripe_status", sa.String(32), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("closed_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_disputes")),
    )
    op.create_index(op.f("ix_disputes_tenant_id"), "disputes", ["tenant_id"])
    op.create_index(op.f("ix_disputes_order_id"), "disputes", ["order_id"])
    op.create_table(
        "card_refunds",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("refund_id", sa.String(100), nullable=False),
        sa.Column("order_id", sa.String(32), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stripe_refund_id", sa.String(255), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(100), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_card_refunds")),
        sa.UniqueConstraint(
            "tenant_id", "refund_id", name=op.f("uq_card_refunds_tenant_id_refund_id")
        ),
    )
    op.create_index(op.f("ix_card_refunds_order_id"), "card_refunds", ["order_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_card_refunds_order_id"), table_name="card_refunds")
    op.drop_table("card_refunds")
    op.drop_index(op.f("ix_disputes_order_id"), table_name="disputes")
    op.drop_index(op.f("ix_disputes_tenant_id"), table_name="disputes")
    op.drop_table("disputes")
    with op.batch_alter_table("payment_orders", schema=None) as batch_op:
        batch_op.drop_column("disputed_micros")
        batch_op.drop_column("refunded_micros")

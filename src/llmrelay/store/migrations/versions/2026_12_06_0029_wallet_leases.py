"""wallet leases: a process reserves a chunk of a prepaid wallet at once and admits requests
against it in memory (billing/allowance.py); `reservations.lease_id` names the lease a
request was admitted under.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import UTCDateTime

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "wallet_leases",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("granted_micros", sa.BigInteger(), nullable=False),
        sa.Column("consumed_micros", sa.BigInteger(), nullable=False),
        sa.Column("returned_micros", sa.BigInteger(), nullable=True),
        sa.Column("grants", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("closed_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wallet_leases")),
    )
    op.create_index(op.f("ix_wallet_leases_tenant_id"), "wallet_leases", ["tenant_id"])
    op.create_index(
        op.f("ix_wallet_leases_status_expires_at"), "wallet_leases", ["status", "expires_at"]
    )
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_id", sa.String(32), nullable=True))
        batch_op.create_index(op.f("ix_reservations_lease_id"), ["lease_id"])


def downgrade() -> None:
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.drop_index(op.f("ix_reservations_lease_id"))
        batch_op.drop_column("lease_id")
    op.drop_index(op.f("ix_wallet_leases_status_expires_at"), table_name="wallet_leases")
    op.drop_index(op.f("ix_wallet_leases_tenant_id"), table_name="wallet_leases")
    op.drop_table("wallet_leases")

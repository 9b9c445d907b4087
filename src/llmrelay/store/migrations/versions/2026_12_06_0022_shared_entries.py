"""shared entries: what the replicas share without Redis, or while it is down (stored
responses' homes, conversation bindings; shared/store.py).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "shared_entries",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_shared_entries")),
    )
    op.create_index(
        op.f("ix_shared_entries_expires_at"), "shared_entries", ["expires_at"], unique=False
    )
    op.create_index(
        op.f("ix_shared_entries_kind_expires_at"),
        "shared_entries",
        ["kind", "expires_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_shared_entries_kind_expires_at"), table_name="shared_entries")
    op.drop_index(op.f("ix_shared_entries_expires_at"), table_name="shared_entries")
    op.drop_table("shared_entries")

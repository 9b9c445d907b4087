"""request records carry their cost (micro-USD), summed for monthly budgets

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ALTER (see 0004); budgets sum it per key and project since the month began.
    op.add_column("request_records", sa.Column("cost_micros", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_request_records_key_id_created_at", "request_records", ["key_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_request_records_key_id_created_at", table_name="request_records")
    op.drop_column("request_records", "cost_micros")

"""route capabilities and route prices (capability-aware candidates, strategy cost_first)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import JSONDoc

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTERs: SQLite adds (and, since 3.35, drops) a column in place, where batch mode
    # would copy the whole table.
    op.add_column("routes", sa.Column("capabilities", JSONDoc, nullable=True))
    op.add_column("routes", sa.Column("pricing", JSONDoc, nullable=True))


def downgrade() -> None:
    op.drop_column("routes", "pricing")
    op.drop_column("routes", "capabilities")

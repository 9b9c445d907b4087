"""provider presets (named OpenAI-compatible servers)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ALTER: batch mode would copy `providers`, and dropping the old table would
    # cascade to every route (see 0002).
    op.add_column("providers", sa.Column("preset", sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.drop_column("providers", "preset")

"""model affinity: sticky routing per conversation is configured per virtual model
(`virtual_models.affinity_enabled`, on by default, and `affinity_ttl_s`, how long an idle
conversation keeps its route).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_models", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("affinity_enabled", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch_op.add_column(
            sa.Column("affinity_ttl_s", sa.Float(), server_default="3600", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("virtual_models", schema=None) as batch_op:
        batch_op.drop_column("affinity_ttl_s")
        batch_op.drop_column("affinity_enabled")

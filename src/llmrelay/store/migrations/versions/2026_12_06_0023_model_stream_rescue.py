"""model stream rescue: a chat stream that breaks or stalls after its content began may be
continued from another route, opted into per virtual model (`virtual_models.stream_rescue`,
off by default).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_models", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("stream_rescue", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("virtual_models", schema=None) as batch_op:
        batch_op.drop_column("stream_rescue")

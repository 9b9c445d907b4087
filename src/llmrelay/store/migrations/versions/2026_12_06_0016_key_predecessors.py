"""key predecessors: the row that keeps a rotated-out secret alive for its grace period
points at the key it is a secret of (`api_keys.rotated_from_id`), so that revoking, disabling
or deleting the key ends every secret of it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rotated_from_id", sa.String(32), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_api_keys_rotated_from_id"), ["rotated_from_id"], unique=False
        )
        batch_op.create_foreign_key(
            batch_op.f("fk_api_keys_rotated_from_id_api_keys"),
            "api_keys",
            ["rotated_from_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_api_keys_rotated_from_id_api_keys"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_api_keys_rotated_from_id"))
        batch_op.drop_column("rotated_from_id")

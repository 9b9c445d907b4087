"""attempt costs: an attempt row carries the tokens it used and what it cost (a stream
rescued mid-answer bills each route that served a part of it; the answering attempt after
failed ones gets the rest of the record's usage and cost).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("request_attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("input_tokens", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("output_tokens", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("cost_micros", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_attempts", schema=None) as batch_op:
        batch_op.drop_column("cost_micros")
        batch_op.drop_column("output_tokens")
        batch_op.drop_column("input_tokens")

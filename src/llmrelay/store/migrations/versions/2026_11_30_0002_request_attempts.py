"""request attempts: attempt count and final route on records, a table of attempts

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("request_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempts", sa.Integer(), server_default="1", nullable=False))
        batch_op.add_column(sa.Column("route_id", sa.String(length=32), nullable=True))
    op.create_table(
        "request_attempts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("route_id", sa.String(length=32), nullable=True),
        sa.Column("provider", sa.String(length=64), nullable=True),
        sa.Column("upstream_model", sa.String(length=200), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=64), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_attempts")),
        sa.UniqueConstraint(
            "request_id", "attempt", name=op.f("uq_request_attempts_request_id_attempt")
        ),
    )
    with op.batch_alter_table("request_attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_request_attempts_request_id"), ["request_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("request_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_request_attempts_request_id"))
    op.drop_table("request_attempts")
    with op.batch_alter_table("request_records", schema=None) as batch_op:
        batch_op.drop_column("route_id")
        batch_op.drop_column("attempts")

"""hourly usage rollups, and the hours whose rollups need recomputing

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import BigIntPK, JSONDoc, UTCDateTime

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SUMS = (
    "requests",
    "errors",
    "estimated",
    "prompt_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_micros",
)


def upgrade() -> None:
    op.create_table(
        "usage_rollups",
        sa.Column("id", BigIntPK, autoincrement=True, nullable=False),
        sa.Column("hour", UTCDateTime(timezone=True), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("project_id", sa.String(32), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("virtual_model", sa.String(200), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in _SUMS),
        sa.Column("latency_bins", JSONDoc, nullable=False),
        sa.Column("ttfb_bins", JSONDoc, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_rollups")),
        sa.UniqueConstraint(
            "hour",
            "tenant_id",
            "project_id",
            "key_id",
            "virtual_model",
            "provider",
            name="uq_usage_rollups_dimensions",
        ),
    )
    op.create_index("ix_usage_rollups_project_id_hour", "usage_rollups", ["project_id", "hour"])
    op.create_index("ix_usage_rollups_key_id_hour", "usage_rollups", ["key_id", "hour"])
    op.create_table(
        "usage_rollup_dirty",
        sa.Column("hour", UTCDateTime(timezone=True), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", name=op.f("pk_usage_rollup_dirty")),
    )
    # Every hour that already has records starts dirty: the first rollup run computes them.
    op.execute(
        "INSERT INTO usage_rollup_dirty (hour, version) SELECT DISTINCT "
        + (
            "date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
            if op.get_bind().dialect.name == "postgresql"
            else "substr(created_at, 1, 13) || ':00:00.000000'"
        )
        + ", 1 FROM request_records"
    )


def downgrade() -> None:
    op.drop_table("usage_rollup_dirty")
    op.drop_index("ix_usage_rollups_key_id_hour", table_name="usage_rollups")
    op.drop_index("ix_usage_rollups_project_id_hour", table_name="usage_rollups")
    op.drop_table("usage_rollups")

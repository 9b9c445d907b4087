"""request records carry usage by billing bucket, cost by bucket, the price version, where
the usage came from, and the client's protocol, address and user agent

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TOKENS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)
_COSTS = (
    "input_cost_micros",
    "cached_input_cost_micros",
    "cache_write_cost_micros",
    "output_cost_micros",
)


def upgrade() -> None:
    # Plain ALTERs (see 0004): nullable columns cost nothing on existing rows.
    table = "request_records"
    op.add_column(table, sa.Column("protocol", sa.String(16), nullable=True))
    for name in _TOKENS:
        op.add_column(table, sa.Column(name, sa.Integer(), nullable=True))
    op.add_column(
        table, sa.Column("usage_source", sa.String(16), nullable=False, server_default="none")
    )
    for name in _COSTS:
        op.add_column(table, sa.Column(name, sa.BigInteger(), nullable=True))
    op.add_column(table, sa.Column("price_version", sa.String(80), nullable=True))
    op.add_column(table, sa.Column("price_source", sa.String(16), nullable=True))
    op.add_column(table, sa.Column("client_ip", sa.String(64), nullable=True))
    op.add_column(table, sa.Column("user_agent", sa.String(200), nullable=True))
    op.create_index(
        "ix_request_records_virtual_model_created_at", table, ["virtual_model", "created_at"]
    )


def downgrade() -> None:
    table = "request_records"
    op.drop_index("ix_request_records_virtual_model_created_at", table_name=table)
    with op.batch_alter_table(table) as batch:
        for name in (
            "user_agent",
            "client_ip",
            "price_source",
            "price_version",
            *_COSTS,
            "usage_source",
            *_TOKENS,
            "protocol",
        ):
            batch.drop_column(name)

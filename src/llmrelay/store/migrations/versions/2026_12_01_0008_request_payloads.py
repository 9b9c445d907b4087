"""payload capture: a key's capture mode, and a table of captured request and response
bodies apart from the records

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import BigIntPK, UTCDateTime

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ALTER, not a batch copy: on SQLite a copy drops `api_keys`, and nothing may
    # cascade from that (see 0002). The server default fills existing keys with "off".
    op.add_column(
        "api_keys", sa.Column("capture", sa.String(8), nullable=False, server_default="off")
    )
    op.create_table(
        "request_payloads",
        sa.Column("id", BigIntPK, autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("request_body", sa.LargeBinary(), nullable=True),
        sa.Column("response_body", sa.LargeBinary(), nullable=True),
        sa.Column("request_truncated", sa.Boolean(), nullable=False),
        sa.Column("response_truncated", sa.Boolean(), nullable=False),
        sa.Column("request_bytes", sa.BigInteger(), nullable=True),
        sa.Column("response_bytes", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_payloads")),
        sa.UniqueConstraint("request_id", name=op.f("uq_request_payloads_request_id")),
    )
    op.create_index(
        op.f("ix_request_payloads_created_at"), "request_payloads", ["created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_request_payloads_created_at"), table_name="request_payloads")
    op.drop_table("request_payloads")
    op.drop_column("api_keys", "capture")  # not in batch: see the upgrade

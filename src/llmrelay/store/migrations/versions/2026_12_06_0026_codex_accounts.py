"""codex accounts: ChatGPT accounts signed in by OAuth for `openai_codex` providers, their
sealed tokens and last known usage limits (store/models_codex.py).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import JSONDoc, UTCDateTime

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "codex_accounts",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("provider_id", sa.String(length=32), nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("plan_type", sa.String(length=32), nullable=True),
        sa.Column("issuer", sa.String(length=500), nullable=False),
        sa.Column("client_id", sa.String(length=100), nullable=False),
        sa.Column("tokens_sealed", sa.Text(), nullable=False),
        sa.Column("tokens_key_id", sa.String(length=16), nullable=True),
        sa.Column("access_expires_at", UTCDateTime(), nullable=True),
        sa.Column("token_generation", sa.Integer(), server_default="1", nullable=False),
        sa.Column("refreshed_at", UTCDateTime(), nullable=True),
        sa.Column("limits", JSONDoc, nullable=True),
        sa.Column("exhausted_until", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["providers.id"],
            name=op.f("fk_codex_accounts_provider_id_providers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_codex_accounts")),
        sa.UniqueConstraint(
            "provider_id", "account_id", name=op.f("uq_codex_accounts_provider_id_account_id")
        ),
    )
    op.create_index(
        op.f("ix_codex_accounts_provider_id"), "codex_accounts", ["provider_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_codex_accounts_provider_id"), table_name="codex_accounts")
    op.drop_table("codex_accounts")

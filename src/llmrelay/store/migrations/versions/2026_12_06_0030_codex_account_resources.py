"""codex account resources: each ChatGPT account signed in for an `openai_codex` provider is
one of the provider's resources (`codex_accounts.resource_id`, unique, its row deleted with
the resource). Every account already signed in gets a resource of its own (named after the
account), so a provider's one account keeps serving exactly as before.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06
"""

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("codex_accounts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resource_id", sa.String(32), nullable=True))
        batch_op.create_index(op.f("ix_codex_accounts_resource_id"), ["resource_id"], unique=True)
        batch_op.create_foreign_key(
            op.f("fk_codex_accounts_resource_id_provider_resources"),
            "provider_resources",
            ["resource_id"],
            ["id"],
            ondelete="CASCADE",
        )
    connection = op.get_bind()
    accounts = connection.execute(
        sa.text(
            "SELECT id, provider_id, account_id, email FROM codex_accounts"
            " ORDER BY provider_id, created_at"
        )
    ).all()
    now = datetime.now(UTC)
    for account in accounts:
        taken = {
            row[0]
            for row in connection.execute(
                sa.text("SELECT name FROM provider_resources WHERE provider_id = :p"),
                {"p": account.provider_id},
            )
        }
        position = connection.execute(
            sa.text(
                "SELECT COALESCE(MAX(position), -1) + 1 FROM provider_resources"
                " WHERE provider_id = :p"
            ),
            {"p": account.provider_id},
        ).scalar_one()
        resource_id = uuid.uuid4().hex
        connection.execute(
            sa.text(
                "INSERT INTO provider_resources (id, provider_id, name, priority, weight,"
                " disabled, position, version, created_at, updated_at) VALUES (:id, :p, :name,"
                " 0, 1.0, :disabled, :position, 1, :now, :now)"
            ),
            {
                "id": resource_id,
                "p": account.provider_id,
                "name": _name(account.email, account.account_id, taken),
                "disabled": False,
                "position": position,
                "now": now,
            },
        )
        connection.execute(
            sa.text("UPDATE codex_accounts SET resource_id = :r WHERE id = :id"),
            {"r": resource_id, "id": account.id},
        )


def _name(email: str | None, account_id: str, taken: set[str]) -> str:
    """A resource name (a slug, unique within the provider) for an account (as
    codex_vault.resource_name makes them; copied: a migration keeps its own code)."""
    base = (email or "").split("@", 1)[0] or account_id
    base = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-._")[:48] or "account"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def downgrade() -> None:
    # The resources the accounts made stay (they are plain resources without a key).
    with op.batch_alter_table("codex_accounts", schema=None) as batch_op:
        batch_op.drop_constraint(
            op.f("fk_codex_accounts_resource_id_provider_resources"), type_="foreignkey"
        )
        batch_op.drop_index(op.f("ix_codex_accounts_resource_id"))
        batch_op.drop_column("resource_id")

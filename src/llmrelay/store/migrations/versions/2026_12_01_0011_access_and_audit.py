"""console identity and the audit log: users, memberships, sessions, recovery codes, sign-in
failures, audit entries; tenants get `require_2fa` and a `version`

New tables only, plus two columns on `tenants` added in batch mode: on SQLite adding a
column with a constant default is an ALTER TABLE, not a table copy, so no project or key row
(ON DELETE CASCADE from tenants) is touched.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import BigIntPK, JSONDoc, UTCDateTime

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _user(table: str) -> tuple[sa.Column[str], sa.ForeignKeyConstraint]:
    """The user_id column of a table owned by a user, gone with the user."""
    return (
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f(f"fk_{table}_user_id_users"), ondelete="CASCADE"
        ),
    )


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("require_2fa", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("version", sa.Integer(), server_default="1", nullable=False))

    op.create_table(
        "users",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("password_hash", sa.String(200), nullable=False),
        sa.Column("password_changed_at", UTCDateTime(), nullable=False),
        sa.Column("platform_admin", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("disabled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("totp_secret_sealed", sa.Text(), nullable=True),
        sa.Column("totp_enabled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("totp_last_step", sa.Integer(), nullable=True),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
    )
    op.create_table(
        "memberships",
        sa.Column("id", sa.String(32), nullable=False),
        *_user("memberships"),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("project_ids", JSONDoc, nullable=True),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_memberships_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memberships")),
        sa.UniqueConstraint("user_id", "tenant_id", name=op.f("uq_memberships_user_id_tenant_id")),
    )
    op.create_index(op.f("ix_memberships_tenant_id"), "memberships", ["tenant_id"])
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        *_user("console_sessions"),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("last_seen_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.Column("ip", sa.String(64), nullable=True),
        sa.Column("user_agent", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_sessions")),
        sa.UniqueConstraint("token_digest", name=op.f("uq_console_sessions_token_digest")),
    )
    op.create_index(op.f("ix_console_sessions_user_id"), "console_sessions", ["user_id"])
    op.create_table(
        "recovery_codes",
        sa.Column("id", sa.String(32), nullable=False),
        *_user("recovery_codes"),
        sa.Column("code_digest", sa.String(64), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_recovery_codes")),
    )
    op.create_index(op.f("ix_recovery_codes_user_id"), "recovery_codes", ["user_id"])
    op.create_table(
        "login_failures",
        sa.Column("id", BigIntPK, autoincrement=True, nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("ip", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_failures")),
    )
    op.create_index(op.f("ix_login_failures_at"), "login_failures", ["at"])
    op.create_index(op.f("ix_login_failures_email_at"), "login_failures", ["email", "at"])
    op.create_index(op.f("ix_login_failures_ip_at"), "login_failures", ["ip", "at"])
    op.create_table(
        "audit_log",
        sa.Column("id", BigIntPK, autoincrement=True, nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor_kind", sa.String(16), nullable=False),
        sa.Column("actor_id", sa.String(32), nullable=True),
        sa.Column("actor_email", sa.String(320), nullable=True),
        sa.Column("role", sa.String(100), nullable=True),
        sa.Column("tenant_id", sa.String(32), nullable=True),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("target_type", sa.String(64), nullable=True),
        sa.Column("target_id", sa.String(200), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("ip", sa.String(64), nullable=True),
        sa.Column("user_agent", sa.String(200), nullable=True),
        sa.Column("diff", JSONDoc, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"])
    op.create_index(op.f("ix_audit_log_tenant_id_id"), "audit_log", ["tenant_id", "id"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("login_failures")
    op.drop_table("recovery_codes")
    op.drop_table("console_sessions")
    op.drop_table("memberships")
    op.drop_table("users")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("version")
        batch_op.drop_column("require_2fa")

"""Console identity and the audit log: users, memberships, sessions, recovery codes, sign-in
failures and audit entries (migration 0011). On store/models.py's `Base`, so one metadata
holds the whole schema. Secrets are never stored as given: passwords as argon2 hashes,
session tokens and recovery codes as SHA-256 digests, TOTP secrets sealed (store/crypto.py,
context = the user id)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base, Timestamped, Versioned, new_id
from llmrelay.store.types import BigIntPK, JSONDoc, utcnow


class User(Versioned, Timestamped, Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    #: Always lower-cased, so one address is one account whatever its spelling.
    email: Mapped[str] = mapped_column(String(320), unique=True)
    name: Mapped[str | None] = mapped_column(String(200))
    password_hash: Mapped[str] = mapped_column(String(200))
    password_changed_at: Mapped[datetime] = mapped_column(default=utcnow)
    platform_admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: Sealed with store/crypto.Sealer (context = the user id); set at setup, used once enabled.
    totp_secret_sealed: Mapped[str | None] = mapped_column(Text)
    totp_enabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: The last TOTP time step accepted: a code is never accepted twice.
    totp_last_step: Mapped[int | None] = mapped_column(Integer)
    #: A self-service sign-up not confirmed yet (migration 0014): cannot sign in until its
    #: email address is verified.
    pending: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    email_verified_at: Mapped[datetime | None]
    #: The password was set by an admin (migration 0019): temporary, every admin call but the
    #: user's own password change (and sign-out, who am I) answers 403 until it is changed.
    password_change_required: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )


class Membership(Versioned, Timestamped, Base):
    """A user's role in a tenant; `project_ids` limits it to some projects (None = all)."""

    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("user_id", "tenant_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(32))
    project_ids: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)


class ConsoleSession(Base):
    """A signed-in console session. Only the SHA-256 of its token is kept: a copy of the
    database does not let anyone act as the user."""

    __tablename__ = "console_sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    token_digest: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: The absolute end; the idle end is last_seen_at + the idle lifetime.
    expires_at: Mapped[datetime]
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]
    ip: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(200))


class RecoveryCode(Base):
    """A single-use two-factor recovery code, as the SHA-256 of the code."""

    __tablename__ = "recovery_codes"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    code_digest: Mapped[str] = mapped_column(String(64))
    used_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LoginFailure(Base):
    """One failed sign-in, kept in the database so throttling holds across replicas."""

    __tablename__ = "login_failures"
    __table_args__ = (Index(None, "email", "at"), Index(None, "ip", "at"))

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(index=True)
    email: Mapped[str] = mapped_column(String(320))
    ip: Mapped[str | None] = mapped_column(String(64))


class AuditEntry(Base):
    """One state-changing admin request: who, as what, on what, with which outcome."""

    __tablename__ = "audit_log"
    __table_args__ = (Index(None, "tenant_id", "id"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(index=True)
    #: "token", "user", or "anonymous" (a sign-in attempt)
    actor_kind: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[str | None] = mapped_column(String(32))
    actor_email: Mapped[str | None] = mapped_column(String(320))
    role: Mapped[str | None] = mapped_column(String(100))
    tenant_id: Mapped[str | None] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(100))
    target_type: Mapped[str | None] = mapped_column(String(64))
    target_id: Mapped[str | None] = mapped_column(String(200))
    status_code: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str | None] = mapped_column(String(64))
    ip: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(200))
    #: {field: {"before": ..., "after": ...}}, secrets masked (admin/audit.py).
    diff: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)

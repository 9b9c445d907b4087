"""Guardrails (migration 0015): content policies, their bindings to projects and keys, and the
audit records of their hits. On store/models.py's `Base`, so one metadata holds the whole
schema. The gateway-wide binding is the `guardrails` row of `gateway_settings`
(`{"policy_ids": [...]}`).

A hit row never holds the text that matched, nor a digest of it (a short secret's digest is
found again by trying every value): only where it was, which rule and detector, how many
matches and how many characters they covered.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base, Timestamped, Versioned, new_id
from llmrelay.store.types import BigIntPK, JSONDoc

#: The `gateway_settings` key of the global binding.
GUARDRAILS_SETTING = "guardrails"


class GuardrailPolicy(Versioned, Timestamped, Base):
    """A named list of detector rules with their actions (guardrails/policy.py)."""

    __tablename__ = "guardrail_policies"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(String(500))
    #: The rules as the config schema validated them (GuardrailRuleConfig, JSON).
    rules: Mapped[list[dict[str, Any]]] = mapped_column(JSONDoc)


class GuardrailBinding(Base):
    """A policy bound to one project or one key (exactly one of them), at a position in
    that scope's list. No ON DELETE on the policy: a bound policy cannot be deleted (the
    bindings are removed first); a project or key takes its bindings with it."""

    __tablename__ = "guardrail_bindings"
    __table_args__ = (
        UniqueConstraint("project_id", "policy_id"),
        UniqueConstraint("key_id", "policy_id"),
        CheckConstraint("(project_id IS NULL) <> (key_id IS NULL)", name="one_scope"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    policy_id: Mapped[str] = mapped_column(ForeignKey("guardrail_policies.id"), index=True)
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    key_id: Mapped[str | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer, default=0)


class GuardrailHit(Base):
    """Matches of one rule in one field of one request (or its answer), written with the
    request's record in the same batch (gateway/recorder.py), idempotent by (request_id,
    seq). `policy` is the policy's name at the time (a policy may be renamed or deleted
    later; its id stays in `policy_id`)."""

    __tablename__ = "guardrail_hits"
    __table_args__ = (
        UniqueConstraint("request_id", "seq"),
        Index(None, "tenant_id", "created_at"),
        Index(None, "policy_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(index=True)
    tenant_id: Mapped[str] = mapped_column(String(32))
    project_id: Mapped[str] = mapped_column(String(32))
    key_id: Mapped[str] = mapped_column(String(32))
    policy_id: Mapped[str] = mapped_column(String(32))
    policy: Mapped[str] = mapped_column(String(200))
    rule: Mapped[str] = mapped_column(String(200))
    #: What matched: a built-in kind (email, card, aws_access_key...) or a custom rule's name.
    detector: Mapped[str] = mapped_column(String(200))
    #: audit, mask or block.
    action: Mapped[str] = mapped_column(String(8))
    #: request or response.
    location: Mapped[str] = mapped_column(String(8))
    #: Where: `messages[2].content`, `choices[0].message.content`...
    field: Mapped[str] = mapped_column(String(200))
    count: Mapped[int] = mapped_column(Integer)
    #: Characters the matches covered (their length, never their text).
    matched_chars: Mapped[int] = mapped_column(Integer)

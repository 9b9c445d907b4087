"""What the keys API answers with (requests are the config schema's KeyConfig). A key's
secret appears once, in the answer that created or rotated it (`IssuedKeyOut.key`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from llmrelay.admin.projects.schemas import LimitsOut, limits_out
from llmrelay.store.models import ApiKey
from llmrelay.store.types import utcnow


class KeyOut(LimitsOut):
    id: str
    tenant_id: str
    project_id: str
    name: str
    #: The first characters and the last four: enough to recognise a key, never to use it.
    prefix: str
    last_four: str
    #: active, disabled, revoked, or expired (active but past expires_at)
    status: str
    expires_at: datetime | None
    last_used_at: datetime | None
    #: Allowlisted virtual models (intersected with the project's); null = the project's.
    models: list[str] | None
    ip_allowlist: list[str]
    #: The APIs the key may call (chat, responses, messages, embeddings, generate, models,
    #: gemini-native); null = every API.
    scopes: list[str] | None = None
    routing_policy: str | None
    #: Guardrail policies bound to the key, in order.
    guardrails: list[str]
    capture: str
    #: Who owns the row: config (a file), generated (a file, key generated), api.
    source: str
    #: For a rotated-out secret kept alive for its grace period: the id of the key it is a
    #: secret of (revoking, disabling or deleting that key ends it); else null.
    rotated_from: str | None = None
    version: int
    created_at: datetime
    updated_at: datetime


class IssuedKeyOut(KeyOut):
    #: The secret, shown this once; only its digest is stored.
    key: str


class KeyPage(BaseModel):
    data: list[KeyOut]
    next_cursor: str | None


class Rotation(BaseModel):
    #: Seconds the old secret keeps working (0: it stops at once).
    grace_s: int = Field(default=0, ge=0)


def key_values(
    row: ApiKey, policy: str | None, guardrails: list[str] | None = None
) -> dict[str, object]:
    status = row.status
    if status == "active" and row.expires_at is not None and row.expires_at <= utcnow():
        status = "expired"
    return {
        "id": row.id,
        "tenant_id": row.tenant_id,
        "project_id": row.project_id,
        "name": row.name,
        "prefix": row.prefix,
        "last_four": row.last_four,
        "status": status,
        "expires_at": row.expires_at,
        "last_used_at": row.last_used_at,
        "models": row.allowed_models,
        "ip_allowlist": row.ip_allowlist,
        "scopes": row.scopes,
        "routing_policy": policy,
        "guardrails": guardrails or [],
        "capture": row.capture,
        "source": row.source,
        "rotated_from": row.rotated_from_id,
        "version": row.version,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        **limits_out(row),
    }


def key_out(row: ApiKey, policy: str | None, guardrails: list[str] | None = None) -> KeyOut:
    return KeyOut.model_validate(key_values(row, policy, guardrails))


def issued_out(
    row: ApiKey, policy: str | None, secret: str, guardrails: list[str] | None = None
) -> IssuedKeyOut:
    return IssuedKeyOut.model_validate({**key_values(row, policy, guardrails), "key": secret})

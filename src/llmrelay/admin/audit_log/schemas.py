"""Audit entry bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from llmrelay.store.models_access import AuditEntry


class AuditOut(BaseModel):
    id: int
    at: datetime
    actor_kind: str
    actor_id: str | None
    actor_email: str | None
    role: str | None
    tenant_id: str | None
    action: str
    target_type: str | None
    target_id: str | None
    status_code: int
    request_id: str | None
    ip: str | None
    user_agent: str | None
    #: {field: {"before": ..., "after": ...}}, secrets shown as "***"
    diff: dict[str, Any]


class AuditPage(BaseModel):
    data: list[AuditOut]
    next_cursor: str | None


def audit_out(row: AuditEntry) -> AuditOut:
    return AuditOut.model_validate(row, from_attributes=True)

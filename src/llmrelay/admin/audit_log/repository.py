"""The SQL of reading the audit log: newest first, by id (the cursor is the last id)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, false, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import Invalid
from llmrelay.store.models_access import AuditEntry


@dataclass(frozen=True, slots=True)
class AuditFilter:
    #: None: every tenant's entries and those of no tenant (platform admins only)
    tenants: frozenset[str] | None
    actor: str | None = None
    action: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def where(self) -> list[ColumnElement[bool]]:
        clauses: list[ColumnElement[bool]] = []
        if self.tenants is not None:
            clauses.append(AuditEntry.tenant_id.in_(self.tenants) if self.tenants else false())
        if self.actor is not None:
            clauses.append(
                or_(AuditEntry.actor_id == self.actor, AuditEntry.actor_email == self.actor)
            )
        if self.action is not None:
            if self.action.endswith("*"):
                clauses.append(AuditEntry.action.startswith(self.action[:-1], autoescape=True))
            else:
                clauses.append(AuditEntry.action == self.action)
        if self.target is not None:
            clauses.append(AuditEntry.target_id == self.target)
        if self.since is not None:
            clauses.append(AuditEntry.at >= self.since)
        if self.until is not None:
            clauses.append(AuditEntry.at < self.until)
        return clauses


def encode(last_id: int) -> str:
    return base64.urlsafe_b64encode(str(last_id).encode()).decode().rstrip("=")


def decode(cursor: str) -> int:
    try:
        value = int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        value = 0
    if not 0 < value < 2**63:  # ids are positive BIGINTs
        raise Invalid("cursor: not a cursor this API gave", "cursor")
    return value


async def page(
    session: AsyncSession, where: AuditFilter, limit: int, cursor: str | None
) -> tuple[Sequence[AuditEntry], str | None]:
    query = select(AuditEntry).where(*where.where())
    if cursor is not None:
        query = query.where(AuditEntry.id < decode(cursor))
    rows = (await session.scalars(query.order_by(AuditEntry.id.desc()).limit(limit + 1))).all()
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], encode(rows[limit - 1].id)

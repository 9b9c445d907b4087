"""The audit records of guardrail hits: filtered, newest first, a page at a time (the
cursor is the last row's id, opaque to the client)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import Invalid
from llmrelay.store.models_guardrails import GuardrailHit


@dataclass(frozen=True, slots=True)
class HitFilter:
    project_id: str | None = None
    key_id: str | None = None
    policy_id: str | None = None
    request_id: str | None = None
    detector: str | None = None
    action: str | None = None
    location: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def encode(last_id: int) -> str:
    return base64.urlsafe_b64encode(str(last_id).encode()).decode()


def decode(cursor: str) -> int:
    try:
        value = int(base64.urlsafe_b64decode(cursor.encode()).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        value = 0
    if not 0 < value < 2**63:
        raise Invalid("cursor: not a cursor this API gave", "cursor")
    return value


async def page(
    session: AsyncSession,
    filters: HitFilter,
    visible: ColumnElement[bool] | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[GuardrailHit], str | None]:
    H = GuardrailHit
    query = select(H)
    if visible is not None:
        query = query.where(visible)
    equal = {
        H.project_id: filters.project_id,
        H.key_id: filters.key_id,
        H.policy_id: filters.policy_id,
        H.request_id: filters.request_id,
        H.detector: filters.detector,
        H.action: filters.action,
        H.location: filters.location,
    }
    for column, value in equal.items():
        if value is not None:
            query = query.where(column == value)
    if filters.since is not None:
        query = query.where(H.created_at >= filters.since)
    if filters.until is not None:
        query = query.where(H.created_at < filters.until)
    if cursor is not None:
        query = query.where(H.id < decode(cursor))
    rows = (await session.scalars(query.order_by(H.id.desc()).limit(limit + 1))).all()
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], encode(rows[limit - 1].id)

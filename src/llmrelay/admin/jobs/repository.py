"""The SQL of reading jobs: newest first, by (created_at, id) after an opaque cursor."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import Invalid
from llmrelay.store.models_jobs import Job


async def get(session: AsyncSession, job_id: str) -> Job | None:
    return await session.get(Job, job_id)


def encode(row: Job) -> str:
    text = f"{row.created_at.isoformat()}|{row.id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, str]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, _, job_id = text.partition("|")
        when = datetime.fromisoformat(moment)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Invalid("cursor: not a cursor this API gave", "cursor") from None
    if when.tzinfo is None or not 0 < len(job_id) <= 32:
        raise Invalid("cursor: not a cursor this API gave", "cursor")
    return when, job_id


async def page(
    session: AsyncSession,
    *,
    where: ColumnElement[bool] | None,
    kind: str | None,
    status: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[Job], str | None]:
    query = select(Job)
    if where is not None:
        query = query.where(where)
    if kind is not None:
        query = query.where(Job.kind == kind)
    if status is not None:
        query = query.where(Job.status == status)
    if cursor is not None:
        when, job_id = decode(cursor)
        query = query.where(
            or_(Job.created_at < when, and_(Job.created_at == when, Job.id < job_id))
        )
    ordered = query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)
    rows = (await session.scalars(ordered)).all()
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], encode(rows[limit - 1])

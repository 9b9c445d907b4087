"""The SQL of webhook deliveries: a project's, newest first (the cursor: the last row's
creation time and id)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import Invalid
from llmrelay.store.models_jobs import WebhookDelivery


def encode(row: WebhookDelivery) -> str:
    text = f"{row.created_at.isoformat()}|{row.id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, str]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        when, _, row_id = text.partition("|")
        return datetime.fromisoformat(when), row_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Invalid("cursor: not a cursor this API gave", "cursor") from None


async def page(
    session: AsyncSession,
    project_id: str,
    status: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[WebhookDelivery], str | None]:
    query = select(WebhookDelivery).where(WebhookDelivery.project_id == project_id)
    if status is not None:
        query = query.where(WebhookDelivery.status == status)
    if cursor is not None:
        when, row_id = decode(cursor)
        query = query.where(
            or_(
                WebhookDelivery.created_at < when,
                and_(WebhookDelivery.created_at == when, WebhookDelivery.id < row_id),
            )
        )
    ordered = query.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
    rows = (await session.scalars(ordered.limit(limit + 1))).all()
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], encode(rows[limit - 1])

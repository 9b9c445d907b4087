"""The SQL of the outbox listing: newest first, by (created_at, id) cursor."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.store.models_billing import EmailMessage


async def page(
    session: AsyncSession,
    *,
    tenants: Collection[str] | None,
    status: str | None,
    kind: str | None,
    to: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> Sequence[EmailMessage]:
    query = select(EmailMessage)
    if tenants is not None:  # a member sees its tenants' mails, never the platform's
        query = query.where(EmailMessage.tenant_id.in_(list(tenants)))
    if status:
        query = query.where(EmailMessage.status == status)
    if kind:
        query = query.where(EmailMessage.kind == kind)
    if to:
        query = query.where(EmailMessage.to_address == to)
    if after is not None:
        at, mail_id = after
        query = query.where(
            or_(
                EmailMessage.created_at < at,
                and_(EmailMessage.created_at == at, EmailMessage.id < mail_id),
            )
        )
    rows = await session.scalars(
        query.order_by(EmailMessage.created_at.desc(), EmailMessage.id.desc()).limit(limit)
    )
    return rows.all()

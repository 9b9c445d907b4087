"""The SQL of tenants."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import Tenant


async def get(session: AsyncSession, tenant_id: str) -> Tenant | None:
    return await session.get(Tenant, tenant_id)


async def by_slug(session: AsyncSession, slug: str) -> Tenant | None:
    return await session.scalar(select(Tenant).where(Tenant.slug == slug))


async def list_page(
    session: AsyncSession, where: ColumnElement[bool] | None, limit: int, cursor: str | None
) -> tuple[Sequence[Tenant], str | None]:
    query = select(Tenant)
    if where is not None:
        query = query.where(where)
    return await pages.page(session, query, Tenant.id, limit, cursor)

"""The SQL of projects."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import ApiKey, Project


async def get(session: AsyncSession, project_id: str) -> Project | None:
    return await session.get(Project, project_id)


async def by_name(session: AsyncSession, tenant_id: str, name: str) -> Project | None:
    found: Project | None = await session.scalar(
        select(Project).where(Project.tenant_id == tenant_id, Project.name == name)
    )
    return found


async def keys_by_name(session: AsyncSession, project_id: str) -> dict[str, ApiKey]:
    rows = await session.scalars(select(ApiKey).where(ApiKey.project_id == project_id))
    return {row.name: row for row in rows}


async def list_page(
    session: AsyncSession,
    *,
    where: ColumnElement[bool] | None,
    tenant_id: str | None,
    name: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[Project], str | None]:
    query = select(Project)
    if where is not None:
        query = query.where(where)
    if tenant_id is not None:
        query = query.where(Project.tenant_id == tenant_id)
    if name is not None:
        query = query.where(Project.name == name)
    return await pages.page(session, query, Project.id, limit, cursor)

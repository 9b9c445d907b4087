"""The SQL of API keys."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import ApiKey


async def get(session: AsyncSession, key_id: str) -> ApiKey | None:
    return await session.get(ApiKey, key_id)


async def by_name(session: AsyncSession, project_id: str, name: str) -> ApiKey | None:
    found: ApiKey | None = await session.scalar(
        select(ApiKey).where(ApiKey.project_id == project_id, ApiKey.name == name)
    )
    return found


async def digest_taken(session: AsyncSession, digest: str, other_than: str | None) -> bool:
    query = select(ApiKey.id).where(ApiKey.digest == digest)
    if other_than is not None:
        query = query.where(ApiKey.id != other_than)
    return await session.scalar(query) is not None


async def predecessors(session: AsyncSession, key_id: str) -> list[ApiKey]:
    """The rows that keep secrets rotated out of the key alive (and theirs, when such a
    row was rotated in turn)."""
    found: list[ApiKey] = []
    parents = [key_id]
    while parents:
        rows = list(
            await session.scalars(select(ApiKey).where(ApiKey.rotated_from_id.in_(parents)))
        )
        found.extend(rows)
        parents = [row.id for row in rows]
    return found


async def list_page(
    session: AsyncSession,
    *,
    where: ColumnElement[bool] | None,
    project_id: str | None,
    status: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[ApiKey], str | None]:
    query = select(ApiKey)
    if where is not None:
        query = query.where(where)
    if project_id is not None:
        query = query.where(ApiKey.project_id == project_id)
    if status is not None:
        query = query.where(ApiKey.status == status)
    return await pages.page(session, query, ApiKey.id, limit, cursor)

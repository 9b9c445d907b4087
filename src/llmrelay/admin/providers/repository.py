"""The SQL of providers."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import Provider, Route, RoutingPolicy, VirtualModel


async def get(session: AsyncSession, provider_id: str) -> Provider | None:
    return await session.get(Provider, provider_id)


async def by_slug(session: AsyncSession, tenant_id: str, slug: str) -> Provider | None:
    found: Provider | None = await session.scalar(
        select(Provider).where(Provider.tenant_id == tenant_id, Provider.slug == slug)
    )
    return found


async def models_routing_to(session: AsyncSession, provider_id: str) -> list[str]:
    """Names of the virtual models with a route to the provider."""
    rows = await session.scalars(
        select(VirtualModel.name)
        .join(Route, Route.model_id == VirtualModel.id)
        .where(Route.provider_id == provider_id)
        .distinct()
    )
    return sorted(rows)


async def policies_naming(session: AsyncSession, tenant_id: str, slug: str) -> list[str]:
    rows = await session.scalars(select(RoutingPolicy).where(RoutingPolicy.tenant_id == tenant_id))
    return sorted(p.name for p in rows if p.providers is not None and slug in p.providers)


async def list_page(
    session: AsyncSession,
    *,
    where: ColumnElement[bool] | None,
    tenant_id: str | None,
    type_: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[Provider], str | None]:
    query = select(Provider)
    if where is not None:
        query = query.where(where)
    if tenant_id is not None:
        query = query.where(Provider.tenant_id == tenant_id)
    if type_ is not None:
        query = query.where(Provider.type == type_)
    return await pages.page(session, query, Provider.id, limit, cursor)

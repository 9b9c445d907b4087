"""The SQL of provider health: providers with their health rows, and the routes whose
breakers a caller may see."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.store.models import Provider, Route
from llmrelay.store.models_jobs import ProviderHealth


async def providers_with_health(
    session: AsyncSession, where: ColumnElement[bool] | None, tenant_id: str | None
) -> Sequence[tuple[Provider, ProviderHealth | None]]:
    query = select(Provider, ProviderHealth).outerjoin(
        ProviderHealth, ProviderHealth.provider_id == Provider.id
    )
    if where is not None:
        query = query.where(where)
    if tenant_id is not None:
        query = query.where(Provider.tenant_id == tenant_id)
    rows = await session.execute(query.order_by(Provider.tenant_id, Provider.slug))
    return [(provider, health) for provider, health in rows]


async def health_of(session: AsyncSession, provider_id: str) -> ProviderHealth | None:
    return await session.get(ProviderHealth, provider_id)


async def routes_of(
    session: AsyncSession, route_ids: Collection[str], providers: Collection[str]
) -> list[str]:
    """Those of `route_ids` whose provider is one of `providers` (in order)."""
    if not route_ids or not providers:
        return []
    found = await session.scalars(
        select(Route.id)
        .where(Route.id.in_(list(route_ids)), Route.provider_id.in_(list(providers)))
        .order_by(Route.id)
    )
    return list(found)

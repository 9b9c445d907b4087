"""The SQL of virtual models and routes."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import ApiKey, Project, Provider, Route, Tenant, VirtualModel


async def get(session: AsyncSession, model_id: str) -> VirtualModel | None:
    return await session.get(VirtualModel, model_id)


async def by_name(session: AsyncSession, tenant_id: str, name: str) -> VirtualModel | None:
    found: VirtualModel | None = await session.scalar(
        select(VirtualModel).where(VirtualModel.tenant_id == tenant_id, VirtualModel.name == name)
    )
    return found


async def routes(session: AsyncSession, model_id: str) -> Sequence[Route]:
    rows = await session.scalars(
        select(Route).where(Route.model_id == model_id).order_by(Route.position, Route.id)
    )
    return rows.all()


async def routes_of(session: AsyncSession, model_ids: Collection[str]) -> dict[str, list[Route]]:
    """Routes of several models (a page), in each model's order."""
    found: dict[str, list[Route]] = {model_id: [] for model_id in model_ids}
    if model_ids:
        rows = await session.scalars(
            select(Route).where(Route.model_id.in_(model_ids)).order_by(Route.position, Route.id)
        )
        for row in rows:
            found[row.model_id].append(row)
    return found


async def slugs_of(session: AsyncSession, tenant_ids: Collection[str]) -> dict[str, str]:
    """Provider id -> slug in several tenants."""
    if not tenant_ids:
        return {}
    rows = await session.execute(
        select(Provider.id, Provider.slug).where(Provider.tenant_id.in_(tenant_ids))
    )
    return {row[0]: row[1] for row in rows}


async def get_route(session: AsyncSession, route_id: str) -> Route | None:
    return await session.get(Route, route_id)


async def provider_slugs(session: AsyncSession, tenant_id: str) -> dict[str, str]:
    """Provider id -> slug."""
    rows = await session.execute(
        select(Provider.id, Provider.slug).where(Provider.tenant_id == tenant_id)
    )
    return {row[0]: row[1] for row in rows}


async def users_of(session: AsyncSession, model: VirtualModel) -> list[str]:
    """What names the model: other models' fallbacks, project and key allowlists, the
    tenant's preferences."""
    found = []
    tenant = await session.get(Tenant, model.tenant_id)
    for field, named in ((tenant.preferences or {}) if tenant else {}).items():
        if named == model.name:
            found.append(f"the tenant's preferences ({field})")
    for other in await session.scalars(
        select(VirtualModel).where(VirtualModel.tenant_id == model.tenant_id)
    ):
        if other.id != model.id and model.name in (*other.fallbacks, *other.context_fallbacks):
            found.append(f"model {other.name}")
    for project in await session.scalars(
        select(Project).where(Project.tenant_id == model.tenant_id)
    ):
        if project.allowed_models and model.name in project.allowed_models:
            found.append(f"project {project.name}")
    for key in await session.scalars(select(ApiKey).where(ApiKey.tenant_id == model.tenant_id)):
        if key.allowed_models and model.name in key.allowed_models:
            found.append(f"key {key.name}")
    return found


async def list_page(
    session: AsyncSession,
    *,
    where: ColumnElement[bool] | None,
    tenant_id: str | None,
    name: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[VirtualModel], str | None]:
    query = select(VirtualModel)
    if where is not None:
        query = query.where(where)
    if tenant_id is not None:
        query = query.where(VirtualModel.tenant_id == tenant_id)
    if name is not None:
        query = query.where(VirtualModel.name == name)
    return await pages.page(session, query, VirtualModel.id, limit, cursor)

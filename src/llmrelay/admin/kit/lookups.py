"""Names a tenant's rows are known by (the repository part every domain needs): the rules of
one resource check references to others (a project's allowlist names models, a route names a
provider, a binding names a policy), by name as the YAML does."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.store.models import Provider, RoutingPolicy, Tenant, VirtualModel
from llmrelay.store.models_guardrails import GuardrailPolicy


async def tenant_exists(session: AsyncSession, tenant_id: str) -> bool:
    return await session.scalar(select(Tenant.id).where(Tenant.id == tenant_id)) is not None


async def model_names(session: AsyncSession, tenant_id: str) -> frozenset[str]:
    rows = await session.scalars(
        select(VirtualModel.name).where(VirtualModel.tenant_id == tenant_id)
    )
    return frozenset(rows)


async def providers_by_slug(session: AsyncSession, tenant_id: str) -> dict[str, Provider]:
    rows = await session.scalars(select(Provider).where(Provider.tenant_id == tenant_id))
    return {row.slug: row for row in rows}


async def policies_by_name(session: AsyncSession, tenant_id: str) -> dict[str, RoutingPolicy]:
    rows = await session.scalars(select(RoutingPolicy).where(RoutingPolicy.tenant_id == tenant_id))
    return {row.name: row for row in rows}


async def guardrail_names(session: AsyncSession, tenant_id: str) -> frozenset[str]:
    rows = await session.scalars(
        select(GuardrailPolicy.name).where(GuardrailPolicy.tenant_id == tenant_id)
    )
    return frozenset(rows)


async def policy_name(session: AsyncSession, policy_id: str | None) -> str | None:
    if policy_id is None:
        return None
    name: str | None = await session.scalar(
        select(RoutingPolicy.name).where(RoutingPolicy.id == policy_id)
    )
    return name


async def policy_names(session: AsyncSession, policy_ids: Iterable[str | None]) -> dict[str, str]:
    """Policy id -> name for the ids given (one query for a whole page of rows)."""
    wanted = {i for i in policy_ids if i is not None}
    if not wanted:
        return {}
    rows = await session.execute(
        select(RoutingPolicy.id, RoutingPolicy.name).where(RoutingPolicy.id.in_(wanted))
    )
    return {row[0]: row[1] for row in rows}

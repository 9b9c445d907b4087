"""The SQL of routing policies."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import ApiKey, GatewaySetting, Project, RoutingPolicy


async def get(session: AsyncSession, policy_id: str) -> RoutingPolicy | None:
    return await session.get(RoutingPolicy, policy_id)


async def by_name(session: AsyncSession, tenant_id: str, name: str) -> RoutingPolicy | None:
    found: RoutingPolicy | None = await session.scalar(
        select(RoutingPolicy).where(
            RoutingPolicy.tenant_id == tenant_id, RoutingPolicy.name == name
        )
    )
    return found


async def bindings(session: AsyncSession, policy_id: str) -> list[str]:
    """What binds the policy: projects, keys, the gateway-wide `routing` setting."""
    found = [
        f"project {name}"
        for name in await session.scalars(
            select(Project.name).where(Project.routing_policy_id == policy_id)
        )
    ]
    found += [
        f"key {name}"
        for name in await session.scalars(
            select(ApiKey.name).where(ApiKey.routing_policy_id == policy_id)
        )
    ]
    routing = await session.get(GatewaySetting, "routing")
    if routing is not None and routing.value.get("policy_id") == policy_id:
        found.append("the gateway-wide routing.policy")
    return found


async def list_page(
    session: AsyncSession,
    *,
    where: ColumnElement[bool] | None,
    tenant_id: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[RoutingPolicy], str | None]:
    query = select(RoutingPolicy)
    if where is not None:
        query = query.where(where)
    if tenant_id is not None:
        query = query.where(RoutingPolicy.tenant_id == tenant_id)
    return await pages.page(session, query, RoutingPolicy.id, limit, cursor)

"""The rules of routes, shared by the admin API and `llmrelay apply`: RouteConfig's
validation (provider slug, upstream model, priority, weight >= 0, tag, capabilities, route
pricing), the provider must exist in the model's tenant, one route per (provider, upstream
model) in a model, and the upstream model must be in the provider's inventory when it has one
(inventory.py).

A model whose last route is removed stays in the directory as a draft: not served (the
snapshot leaves it out, and the fallbacks that name it skip it), not deleted; a new route
makes it served again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import Conflict, Invalid, from_validation
from llmrelay.admin.kit.rows import assign, micros_to_usd, touch, usd_to_micros
from llmrelay.admin.models import inventory, repository
from llmrelay.config.schema import RouteConfig
from llmrelay.store.models import Provider, Route, VirtualModel, new_id

_BUCKETS = ("input", "output", "cached_input", "cache_write")


def parse(data: Mapping[str, Any]) -> RouteConfig:
    try:
        return RouteConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None


def capabilities(route: RouteConfig) -> dict[str, Any] | None:
    """Only what is stated: a capability left out stays unknown."""
    if route.capabilities is None:
        return None
    return route.capabilities.model_dump(exclude_none=True) or None


def route_pricing(route: RouteConfig) -> dict[str, Any] | None:
    if route.pricing is None:
        return None
    stated = {bucket: getattr(route.pricing, f"{bucket}_per_mtok") for bucket in _BUCKETS}
    return {b: usd_to_micros(v) for b, v in stated.items() if v is not None}


def route_values(route: RouteConfig, position: int) -> dict[str, Any]:
    return {
        "priority": route.priority,
        "weight": route.weight,
        "tag": route.tag,
        "disabled": route.disabled,
        "position": position,
        "capabilities": capabilities(route),
        "pricing": route_pricing(route),
    }


def route_config(row: Route, slug: str) -> dict[str, Any]:
    """A stored route as the config states it."""
    stated: dict[str, Any] = {
        "provider": slug,
        "upstream_model": row.upstream_model,
        "priority": row.priority,
        "weight": row.weight,
        "tag": row.tag,
        "disabled": row.disabled,
        "capabilities": row.capabilities,
    }
    if row.pricing is not None:
        stated["pricing"] = {
            f"{b}_per_mtok": micros_to_usd(row.pricing[b]) for b in _BUCKETS if b in row.pricing
        }
    return {k: v for k, v in stated.items() if v is not None}


async def sync_routes(
    session: AsyncSession,
    model: VirtualModel,
    wanted: Sequence[RouteConfig],
    providers: Mapping[str, Provider],
) -> bool:
    """Make the model's routes exactly `wanted` (what apply does, and a model change that
    lists its routes): matched by (provider, upstream model), others deleted."""
    stored = await repository.routes(session, model.id)
    current = {(r.provider_id, r.upstream_model): r for r in stored}
    changed = False
    kept = set()
    for position, route in enumerate(wanted):
        key = (providers[route.provider].id, route.upstream_model)
        kept.add(key)
        row = current.get(key)
        if row is None:
            row = Route(id=new_id(), model_id=model.id, provider_id=key[0], upstream_model=key[1])
            session.add(row)
            changed = True
        changed |= bool(assign(row, route_values(route, position)))
    for key, row in current.items():
        if key not in kept:
            await session.delete(row)
            changed = True
    await session.flush()
    return changed


async def _provider(session: AsyncSession, model: VirtualModel, slug: str) -> Provider:
    providers = await lookups.providers_by_slug(session, model.tenant_id)
    if slug not in providers:
        raise Invalid(f"provider: unknown provider {slug!r}", "provider")
    return providers[slug]


async def _check_unique(
    session: AsyncSession,
    model: VirtualModel,
    provider_id: str,
    upstream: str,
    route_id: str | None,
) -> None:
    for row in await repository.routes(session, model.id):
        if (row.provider_id, row.upstream_model) == (provider_id, upstream) and row.id != route_id:
            raise Conflict(
                "upstream_model: the model already has a route to this provider and model",
                "upstream_model",
            )


async def add_route(session: AsyncSession, model: VirtualModel, config: RouteConfig) -> Route:
    """A new route, after the model's others (strategy fixed tries it last)."""
    provider = await _provider(session, model, config.provider)
    inventory.check(provider, config.upstream_model)
    await _check_unique(session, model, provider.id, config.upstream_model, None)
    existing = await repository.routes(session, model.id)
    position = max((r.position for r in existing), default=-1) + 1
    row = Route(
        id=new_id(),
        model_id=model.id,
        provider_id=provider.id,
        upstream_model=config.upstream_model,
        **route_values(config, position),
    )
    session.add(row)
    touch(model)
    await session.flush()
    return row


async def update_route(
    session: AsyncSession, model: VirtualModel, row: Route, changes: Mapping[str, Any]
) -> list[str]:
    slugs = await repository.provider_slugs(session, model.tenant_id)
    config = parse({**route_config(row, slugs[row.provider_id]), **changes})
    provider = await _provider(session, model, config.provider)
    if (provider.id, config.upstream_model) != (row.provider_id, row.upstream_model):
        inventory.check(provider, config.upstream_model)
    await _check_unique(session, model, provider.id, config.upstream_model, row.id)
    values = route_values(config, row.position)
    values.update(provider_id=provider.id, upstream_model=config.upstream_model)
    changed = assign(row, values)
    if changed:
        touch(model)
    await session.flush()
    return changed


async def delete_route(session: AsyncSession, model: VirtualModel, row: Route) -> None:
    """The last one too: the model becomes a draft."""
    await session.delete(row)
    touch(model)
    await session.flush()

"""The rules of virtual models, shared by the admin API and `llmrelay apply`: ModelConfig's
validation (name without ":", strategy, at least one route, retry and deadline bounds, no
fallback to itself), references checked by the config loader's check_references (route
providers, fallback models), one name per tenant. A model's name is what clients ask for and
what allowlists and fallbacks name, so it cannot change, and a model something still names
cannot be deleted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import Conflict, Invalid, from_problems, from_validation
from llmrelay.admin.kit.rows import Outcome, assign, touch
from llmrelay.admin.models import inventory, repository, routes
from llmrelay.admin.prices import service as prices
from llmrelay.config.loader import check_references
from llmrelay.config.schema import GatewayConfig, ModelConfig
from llmrelay.store.models import Provider, VirtualModel, new_id


def parse(data: Mapping[str, Any], *, draft: bool = False) -> ModelConfig:
    """`draft`: a model without routes passes (a change to a draft that leaves its routes
    out); anywhere else a model needs one."""
    try:
        return ModelConfig.model_validate(dict(data), context={"draft": draft})
    except ValidationError as exc:
        raise from_validation(exc) from None


async def check(session: AsyncSession, tenant_id: str, config: ModelConfig) -> None:
    problems = check_references(
        GatewayConfig(models=[config]),
        known_providers=frozenset(await lookups.providers_by_slug(session, tenant_id)),
        known_models=await lookups.model_names(session, tenant_id),
    )
    found = from_problems(problems, "models[0]")
    if found is not None:
        raise found


def _values(config: ModelConfig) -> dict[str, Any]:
    return {
        "strategy": config.strategy.value,
        "retry_attempts": config.retry.attempts,
        "retry_backoff_ms": config.retry.backoff_ms,
        "deadline_s": config.deadline_s,
        "fallbacks": list(config.fallbacks),
        "context_fallbacks": list(config.context_fallbacks),
        "embedding": config.embedding,
        "affinity_enabled": config.affinity.enabled,
        "affinity_ttl_s": config.affinity.ttl_s,
        "stream_rescue": config.stream_rescue,
    }


async def upsert_model(
    session: AsyncSession,
    tenant_id: str,
    config: ModelConfig,
    row: VirtualModel | None,
    providers: Mapping[str, Provider],
) -> Outcome[VirtualModel]:
    """Create or bring one model in line with `config` (what apply does): its fields, its
    routes (listed completely) and a new price version when its prices changed."""
    created = row is None
    if row is None:
        row = VirtualModel(id=new_id(), tenant_id=tenant_id, name=config.name)
        session.add(row)
    changed = assign(row, _values(config))
    await session.flush()
    if await routes.sync_routes(session, row, config.routes, providers):
        changed.append("routes")
    if config.pricing is not None and await prices.sync_price(session, row, config.pricing):
        changed.append("pricing")
    if not created and changed:
        touch(row)
        await session.flush()
    return Outcome(row, created, [] if created else changed)


async def create_model(session: AsyncSession, tenant_id: str, config: ModelConfig) -> VirtualModel:
    await check(session, tenant_id, config)
    if await repository.by_name(session, tenant_id, config.name) is not None:
        raise Conflict(f"name: a model named {config.name!r} exists", "name")
    providers = await lookups.providers_by_slug(session, tenant_id)
    inventory.check_routes(config.routes, providers)
    return (await upsert_model(session, tenant_id, config, None, providers)).row


async def current_config(session: AsyncSession, row: VirtualModel) -> dict[str, Any]:
    slugs = await repository.provider_slugs(session, row.tenant_id)
    return {
        "name": row.name,
        "strategy": row.strategy,
        "retry": {"attempts": row.retry_attempts, "backoff_ms": row.retry_backoff_ms},
        "deadline_s": row.deadline_s,
        "fallbacks": row.fallbacks,
        "context_fallbacks": row.context_fallbacks,
        "embedding": row.embedding,
        "affinity": {"enabled": row.affinity_enabled, "ttl_s": row.affinity_ttl_s},
        "stream_rescue": row.stream_rescue,
        "routes": [
            routes.route_config(r, slugs[r.provider_id])
            for r in await repository.routes(session, row.id)
        ],
    }


async def update_model(
    session: AsyncSession, row: VirtualModel, changes: Mapping[str, Any]
) -> list[str]:
    """A partial change, validated whole. `routes`, when given, is the complete list (as in
    the file); `pricing`, when given, adds a price version from now if it differs."""
    if "name" in changes and changes["name"] != row.name:
        raise Invalid("name: a model's name cannot change (clients and allowlists use it)", "name")
    config = parse({**await current_config(session, row), **changes}, draft="routes" not in changes)
    await check(session, row.tenant_id, config)
    changed = assign(row, _values(config))
    await session.flush()
    if "routes" in changes:
        providers = await lookups.providers_by_slug(session, row.tenant_id)
        kept = {(r.provider_id, r.upstream_model) for r in await repository.routes(session, row.id)}
        inventory.check_routes(config.routes, providers, kept)
        if await routes.sync_routes(session, row, config.routes, providers):
            changed.append("routes")
    if config.pricing is not None and await prices.sync_price(session, row, config.pricing):
        changed.append("pricing")
    if changed:
        touch(row)
        await session.flush()
    return changed


async def delete_model(session: AsyncSession, row: VirtualModel) -> None:
    """Its routes and price versions go with it; refused while something names it."""
    users = await repository.users_of(session, row)
    if users:
        raise Conflict(f"still named by {', '.join(users)}")
    await session.delete(row)
    await session.flush()

"""Applying the virtual models of a config: the model row, its routes (the file lists them
completely: routes it leaves out are deleted) and a new price version when prices changed."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.config.apply_rows import ApplyResult, assign, existing_or_new, note, usd_to_micros
from llmrelay.config.schema import ModelConfig, PricingConfig, RouteConfig
from llmrelay.store.models import PriceVersion, Provider, Route, VirtualModel, new_id
from llmrelay.store.types import utcnow


async def upsert_model(
    session: AsyncSession,
    tenant_id: str,
    config: ModelConfig,
    existing: dict[str, VirtualModel],
    providers: dict[str, Provider],
    result: ApplyResult,
) -> None:
    row, created = existing_or_new(
        session,
        existing,
        config.name,
        lambda: VirtualModel(id=new_id(), tenant_id=tenant_id, name=config.name),
    )
    changed = assign(
        row,
        {
            "strategy": config.strategy.value,
            "retry_attempts": config.retry.attempts,
            "retry_backoff_ms": config.retry.backoff_ms,
            "deadline_s": config.deadline_s,
            "fallbacks": list(config.fallbacks),
            "context_fallbacks": list(config.context_fallbacks),
            "embedding": config.embedding,
        },
    )
    if await _sync_routes(session, row, config, providers):
        changed.append("routes")
    if config.pricing is not None and await _sync_price(session, row, config.pricing):
        changed.append("pricing")
    note(result, "model", config.name, created, changed)


async def _sync_routes(
    session: AsyncSession, model: VirtualModel, config: ModelConfig, providers: dict[str, Provider]
) -> bool:
    current = {
        (r.provider_id, r.upstream_model): r
        for r in await session.scalars(select(Route).where(Route.model_id == model.id))
    }
    changed = False
    wanted_keys = set()
    for position, route_config in enumerate(config.routes):
        provider_id = providers[route_config.provider].id
        key = (provider_id, route_config.upstream_model)
        wanted_keys.add(key)
        row = current.get(key)
        if row is None:
            row = Route(
                id=new_id(),
                model_id=model.id,
                provider_id=provider_id,
                upstream_model=route_config.upstream_model,
            )
            session.add(row)
            changed = True
        changed |= bool(
            assign(
                row,
                {
                    "priority": route_config.priority,
                    "weight": route_config.weight,
                    "tag": route_config.tag,
                    "disabled": route_config.disabled,
                    "position": position,
                    "capabilities": _capabilities(route_config),
                    "pricing": _route_pricing(route_config),
                },
            )
        )
    for key, row in current.items():
        if key not in wanted_keys:
            await session.delete(row)
            changed = True
    return changed


def _capabilities(route: RouteConfig) -> dict[str, Any] | None:
    """Only what the file states: a capability left out stays unknown."""
    if route.capabilities is None:
        return None
    return route.capabilities.model_dump(exclude_none=True) or None


def _route_pricing(route: RouteConfig) -> dict[str, Any] | None:
    if route.pricing is None:
        return None
    stated = {
        "input": usd_to_micros(route.pricing.input_per_mtok),
        "output": usd_to_micros(route.pricing.output_per_mtok),
        "cached_input": usd_to_micros(route.pricing.cached_input_per_mtok),
        "cache_write": usd_to_micros(route.pricing.cache_write_per_mtok),
    }
    return {bucket: micros for bucket, micros in stated.items() if micros is not None}


async def _sync_price(session: AsyncSession, model: VirtualModel, pricing: PricingConfig) -> bool:
    """Add a price version when the file's prices differ from the version in force."""
    wanted = {
        "input_micros_per_mtok": usd_to_micros(pricing.input_per_mtok),
        "output_micros_per_mtok": usd_to_micros(pricing.output_per_mtok),
        "cached_input_micros_per_mtok": usd_to_micros(pricing.cached_input_per_mtok),
        "cache_write_micros_per_mtok": usd_to_micros(pricing.cache_write_per_mtok),
    }
    now = utcnow()
    latest = await session.scalar(
        select(PriceVersion)
        .where(PriceVersion.model_id == model.id, PriceVersion.effective_from <= now)
        .order_by(PriceVersion.effective_from.desc())
        .limit(1)
    )
    if latest is not None and all(getattr(latest, k) == v for k, v in wanted.items()):
        return False
    session.add(PriceVersion(model_id=model.id, effective_from=now, source="config", **wanted))
    return True

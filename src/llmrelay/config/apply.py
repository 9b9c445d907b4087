"""Applying a validated config to the store: an idempotent upsert in one transaction.

Resources named in the file are created or brought in line with it; resources the file does
not name are left alone (routing policies included), except a model's routes, which the file
lists completely. A binding the file leaves out of an entry it names (a project's or key's
`routing_policy`, `routing.policy` of a `routing` section) is cleared. Applying the same file
twice changes no row and does not move the config generation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVar

import orjson
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay import apikeys
from llmrelay.config.loader import ConfigError, check_references
from llmrelay.config.schema import (
    GatewayConfig,
    KeyConfig,
    ModelConfig,
    PolicyConfig,
    PricingConfig,
    ProjectConfig,
    ProviderConfig,
    RouteConfig,
    RoutingConfig,
)
from llmrelay.store.bootstrap import bump_generation, current_generation, ensure_default_tenant
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.models import (
    ApiKey,
    GatewaySetting,
    PriceVersion,
    Project,
    Provider,
    Route,
    RoutingPolicy,
    VirtualModel,
    new_id,
)
from llmrelay.store.types import utcnow

MICROS = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    project: str
    name: str
    key: str


@dataclass(slots=True)
class ApplyResult:
    changes: list[str] = field(default_factory=list)
    generated_keys: list[GeneratedKey] = field(default_factory=list)
    generation: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def usd_to_micros(value: Decimal | None) -> int | None:
    if value is None:
        return None
    return int((value * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _assign(row: Any, values: dict[str, Any]) -> list[str]:
    """Set only the attributes that differ, so an unchanged row is never written."""
    changed = []
    for name, value in values.items():
        if getattr(row, name) != value:
            setattr(row, name, value)
            changed.append(name)
    return changed


async def apply_config(
    session: AsyncSession, config: GatewayConfig, sealer: Sealer, *, source: str
) -> ApplyResult:
    """Upsert `config` into the default tenant; the caller commits."""
    tenant = await ensure_default_tenant(session)
    result = ApplyResult()
    providers = {
        p.slug: p
        for p in await session.scalars(select(Provider).where(Provider.tenant_id == tenant.id))
    }
    models = {
        m.name: m
        for m in await session.scalars(
            select(VirtualModel).where(VirtualModel.tenant_id == tenant.id)
        )
    }
    policies = {
        p.name: p
        for p in await session.scalars(
            select(RoutingPolicy).where(RoutingPolicy.tenant_id == tenant.id)
        )
    }
    problems = list(
        check_references(config, frozenset(providers), frozenset(models), frozenset(policies))
    )
    if problems:
        raise ConfigError(source, problems)

    for provider_config in config.providers:
        await _upsert_provider(session, tenant.id, provider_config, providers, sealer, result)
    for model_config in config.models:
        await _upsert_model(session, tenant.id, model_config, models, providers, result)
    if config.routing is not None:
        for policy_config in config.routing.policies:
            _upsert_policy(session, tenant.id, policy_config, policies, result)
    for project_config in config.projects:
        await _upsert_project(session, tenant.id, project_config, policies, result)
    if config.routing is not None:
        await _upsert_setting(session, "routing", _routing_value(config.routing, policies), result)

    await session.flush()
    if result.changed:
        result.generation = await bump_generation(session)
    else:
        result.generation = await current_generation(session)
    return result


def _credentials(config: ProviderConfig) -> dict[str, Any] | None:
    if config.api_key is None and not config.headers:
        return None
    return {"api_key": config.api_key, "headers": dict(config.headers)}


def open_credentials(row: Provider, sealer: Sealer) -> dict[str, Any] | None:
    if row.credentials_sealed is None:
        return None
    opened: dict[str, Any] = orjson.loads(sealer.open(row.credentials_sealed, context=row.id))
    return opened


async def _upsert_provider(
    session: AsyncSession,
    tenant_id: str,
    config: ProviderConfig,
    existing: dict[str, Provider],
    sealer: Sealer,
    result: ApplyResult,
) -> None:
    row, created = _existing_or_new(
        session,
        existing,
        config.slug,
        lambda: Provider(id=new_id(), tenant_id=tenant_id, slug=config.slug),
    )
    changed = _assign(
        row,
        {
            "type": config.type.value,
            "base_url": config.effective_base_url,
            "timeout_s": config.timeout_s,
            "connect_timeout_s": config.connect_timeout_s,
            "first_token_timeout_s": config.first_token_timeout_s,
            "stream_idle_timeout_s": config.stream_idle_timeout_s,
            "api_version": config.api_version,
            "region": config.region,
            "preset": config.preset,
        },
    )
    wanted = _credentials(config)
    try:
        same = not created and open_credentials(row, sealer) == wanted
    except CredentialError:
        same = False  # sealed under another secret key: the file's value replaces it
    if created or not same:
        if wanted is None:
            row.credentials_sealed = row.credentials_key_id = row.api_key_last_four = None
        else:
            row.credentials_sealed = sealer.seal(orjson.dumps(wanted), context=row.id)
            row.credentials_key_id = sealer.key_id
            key = wanted["api_key"]
            row.api_key_last_four = key[-4:] if key else None
        if not created:
            changed.append("credentials")
    _note(result, "provider", config.slug, created, changed)


R = TypeVar("R")


def _existing_or_new(
    session: AsyncSession, existing: dict[str, R], key: str, make: Callable[[], R]
) -> tuple[R, bool]:
    """The stored row under `key`, or a new one (added to the session and to `existing`);
    whether it is new."""
    row = existing.get(key)
    if row is not None:
        return row, False
    row = existing[key] = make()
    session.add(row)
    return row, True


async def _upsert_model(
    session: AsyncSession,
    tenant_id: str,
    config: ModelConfig,
    existing: dict[str, VirtualModel],
    providers: dict[str, Provider],
    result: ApplyResult,
) -> None:
    row, created = _existing_or_new(
        session,
        existing,
        config.name,
        lambda: VirtualModel(id=new_id(), tenant_id=tenant_id, name=config.name),
    )
    changed = _assign(
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
    _note(result, "model", config.name, created, changed)


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
            _assign(
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
    return {
        "input": usd_to_micros(route.pricing.input_per_mtok),
        "output": usd_to_micros(route.pricing.output_per_mtok),
    }


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


def _upsert_policy(
    session: AsyncSession,
    tenant_id: str,
    config: PolicyConfig,
    existing: dict[str, RoutingPolicy],
    result: ApplyResult,
) -> None:
    row, created = _existing_or_new(
        session,
        existing,
        config.name,
        lambda: RoutingPolicy(id=new_id(), tenant_id=tenant_id, name=config.name),
    )
    changed = _assign(
        row,
        {
            "providers": _optional_list(config.providers),
            "tags": _optional_list(config.tags),
            "regions": _optional_list(config.regions),
            "strategy": None if config.strategy is None else config.strategy.value,
        },
    )
    _note(result, "routing policy", config.name, created, changed)


def _optional_list(values: list[str] | None) -> list[str] | None:
    return None if values is None else list(values)


def _policy_id(name: str | None, policies: dict[str, RoutingPolicy]) -> str | None:
    return None if name is None else policies[name].id


def _routing_value(config: RoutingConfig, policies: dict[str, RoutingPolicy]) -> dict[str, Any]:
    """The `routing` setting: the breaker, and the global policy binding when there is one
    (left out otherwise, so a value stored before bindings existed stays the same)."""
    value: dict[str, Any] = {"breaker": config.breaker.model_dump(mode="json")}
    if config.policy is not None:
        value["policy_id"] = policies[config.policy].id
    return value


def _limit_values(config: ProjectConfig | KeyConfig) -> dict[str, Any]:
    return {
        "rpm": config.limits.rpm,
        "tpm": config.limits.tpm,
        "concurrency": config.limits.concurrency,
        "monthly_budget_micros": usd_to_micros(config.monthly_budget_usd),
    }


async def _upsert_project(
    session: AsyncSession,
    tenant_id: str,
    config: ProjectConfig,
    policies: dict[str, RoutingPolicy],
    result: ApplyResult,
) -> None:
    row = await session.scalar(
        select(Project).where(Project.tenant_id == tenant_id, Project.name == config.name)
    )
    created = row is None
    if row is None:
        row = Project(id=new_id(), tenant_id=tenant_id, name=config.name)
        session.add(row)
    changed = _assign(
        row,
        {
            "allowed_models": None if config.models is None else list(config.models),
            "routing_policy_id": _policy_id(config.routing_policy, policies),
            **_limit_values(config),
        },
    )
    _note(result, "project", config.name, created, changed)
    keys = {
        k.name: k for k in await session.scalars(select(ApiKey).where(ApiKey.project_id == row.id))
    }
    for key_config in config.keys:
        _upsert_key(session, row, key_config, keys.get(key_config.name), policies, result)


def _upsert_key(
    session: AsyncSession,
    project: Project,
    config: KeyConfig,
    row: ApiKey | None,
    policies: dict[str, RoutingPolicy],
    result: ApplyResult,
) -> None:
    created = row is None
    label = f"{project.name}/{config.name}"
    if row is None:
        row = ApiKey(
            id=new_id(), tenant_id=project.tenant_id, project_id=project.id, name=config.name
        )
        session.add(row)
    values: dict[str, Any] = {
        "status": "disabled" if config.disabled else "active",
        "expires_at": config.expires_at,
        "allowed_models": None if config.models is None else list(config.models),
        "ip_allowlist": list(config.ip_allowlist),
        "routing_policy_id": _policy_id(config.routing_policy, policies),
        **_limit_values(config),
    }
    plain = config.key
    if plain is None and created:
        plain = apikeys.generate_key()
        result.generated_keys.append(GeneratedKey(project.name, config.name, plain))
        values["source"] = "generated"
    elif plain is not None:
        values["source"] = "config"
    if plain is not None:
        shown = apikeys.display(plain)
        values.update(digest=apikeys.digest(plain), prefix=shown.prefix, last_four=shown.last_four)
    changed = _assign(row, values)
    if "digest" in changed and not created:
        changed = [c for c in changed if c not in ("prefix", "last_four", "source")]
    _note(result, "key", label, created, changed)


async def _upsert_setting(
    session: AsyncSession, key: str, value: dict[str, Any], result: ApplyResult
) -> None:
    row = await session.get(GatewaySetting, key)
    if row is None:
        session.add(GatewaySetting(key=key, value=value))
        result.changes.append(f"created setting {key}")
    elif row.value != value:
        row.value = value
        result.changes.append(f"updated setting {key}")


def _note(result: ApplyResult, kind: str, name: str, created: bool, changed: list[str]) -> None:
    if created:
        result.changes.append(f"created {kind} {name}")
    elif changed:
        result.changes.append(f"updated {kind} {name} ({', '.join(sorted(changed))})")

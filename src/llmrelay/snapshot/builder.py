"""Building a snapshot from the database: read everything once, validate, freeze."""

from __future__ import annotations

import ipaddress
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.guardrails.policy import Guard
from llmrelay.metering.cost import Price
from llmrelay.snapshot import resources
from llmrelay.snapshot.guardrails import GuardrailsError, load_guards
from llmrelay.snapshot.model import (
    BreakerSettings,
    Capabilities,
    KeySnap,
    Limits,
    ModelSnap,
    PolicySnap,
    ProjectSnap,
    ProviderSnap,
    RouteSnap,
    Snapshot,
)
from llmrelay.snapshot.validate import validate
from llmrelay.store.bootstrap import current_generation
from llmrelay.store.credentials import open_credentials
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import (
    CAPTURE_FULL,
    CATALOGUE_SOURCE,
    TENANT_DECLARED,
    ApiKey,
    GatewaySetting,
    PriceVersion,
    Project,
    Provider,
    ProviderResource,
    Route,
    RoutingPolicy,
    Tenant,
    VirtualModel,
)
from llmrelay.store.models_billing import Wallet
from llmrelay.store.models_jobs import UNAVAILABLE, ProviderHealth
from llmrelay.store.types import utcnow

log = structlog.get_logger(__name__)

_CAPABILITY_FIELDS = tuple(f.name for f in fields(Capabilities))
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_FIRST_TOKEN_TIMEOUT_S = 120.0
DEFAULT_STREAM_IDLE_TIMEOUT_S = 120.0


class SnapshotError(RuntimeError):
    """The stored configuration cannot be turned into a usable snapshot."""


async def build_snapshot(session: AsyncSession, sealer: Sealer) -> Snapshot:
    bind = session.bind
    if bind is not None and bind.dialect.name == "postgresql":
        # Every query below must see one state of the config: under READ COMMITTED, a
        # replica starting while another applies a config saw the new routes but not yet
        # their new providers, and refused to start ("names a missing provider").
        await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    generation = await current_generation(session)
    providers = {p.id: provider_snap(p, sealer) for p in await session.scalars(select(Provider))}
    # The denylist: a sparse table (a row only while a provider is unhealthy), one small query.
    denied = frozenset(
        await session.scalars(
            select(ProviderHealth.provider_id).where(ProviderHealth.status == UNAVAILABLE)
        )
    )
    # Accounts (resources): without any row this costs one query that finds nothing.
    exhausted = resources.attach(providers, await session.scalars(select(ProviderResource)), sealer)
    routes_by_model: dict[str, list[RouteSnap]] = defaultdict(list)
    for route in await session.scalars(select(Route)):
        routes_by_model[route.model_id].append(_route(route, providers, denied, exhausted))
    price_rows = list(await session.scalars(select(PriceVersion)))
    now = utcnow()
    prices = _prices_in_force(price_rows, now)
    scheduled = [row.effective_from for row in price_rows if row.effective_from > now]

    models: dict[str, dict[str, ModelSnap]] = defaultdict(dict)
    model_rows = list(await session.scalars(select(VirtualModel)))
    # A model without routes is a draft: kept in the directory, never served, and left out
    # of the fallbacks that name it (docs/configuration.md, "Model directory").
    drafts = {(m.tenant_id, m.name) for m in model_rows if m.id not in routes_by_model}
    for model in model_rows:
        if (model.tenant_id, model.name) in drafts:
            continue
        routes = sorted(routes_by_model.get(model.id, ()), key=lambda r: (r.priority, r.position))
        models[model.tenant_id][model.name] = ModelSnap(
            id=model.id,
            tenant_id=model.tenant_id,
            name=model.name,
            strategy=model.strategy,
            routes=tuple(routes),
            retry_attempts=model.retry_attempts,
            retry_backoff_ms=model.retry_backoff_ms,
            deadline_s=model.deadline_s,
            fallbacks=tuple(n for n in model.fallbacks if (model.tenant_id, n) not in drafts),
            context_fallbacks=tuple(
                n for n in model.context_fallbacks if (model.tenant_id, n) not in drafts
            ),
            embedding=model.embedding,
            price=prices.get(model.id),
            created=int(model.created_at.timestamp()),
            affinity_ttl_s=model.affinity_ttl_s if model.affinity_enabled else None,
            stream_rescue=model.stream_rescue,
        )

    default_models = await _apply_preferences(session, models)

    routing = await session.get(GatewaySetting, "routing")
    breaker = BreakerSettings(**routing.value.get("breaker", {})) if routing else BreakerSettings()
    policies = {p.id: _policy(p) for p in await session.scalars(select(RoutingPolicy))}
    global_policy = _bound(policies, routing.value.get("policy_id") if routing else None)

    prepaid = frozenset(await session.scalars(select(Wallet.tenant_id).where(Wallet.prepaid)))
    try:
        guards = await load_guards(session)
    except GuardrailsError as exc:
        raise SnapshotError(str(exc)) from None
    project_rows = {p.id: p for p in await session.scalars(select(Project))}
    projects = {p.id: _project(p) for p in project_rows.values()}
    keys = {}
    key_rows = {key.id: key for key in await session.scalars(select(ApiKey))}
    for key in key_rows.values():
        project = projects.get(key.project_id)
        if project is None:
            raise SnapshotError(f"key {key.id} belongs to a missing project {key.project_id}")
        # The most specific binding applies alone: the key's, the project's, the global one.
        if key.routing_policy_id is not None:
            policy = _bound(policies, key.routing_policy_id)
        elif project_rows[key.project_id].routing_policy_id is not None:
            policy = _bound(policies, project_rows[key.project_id].routing_policy_id)
        else:
            policy = global_policy
        try:
            guard = guards.for_key(key.project_id, key.id)
        except GuardrailsError as exc:
            raise SnapshotError(str(exc)) from None
        status = _family_status(key, key_rows)
        keys[key.digest] = _key(
            key, project, policy, guard, key.tenant_id in prepaid, status, _scopes(key, key_rows)
        )
    snapshot = Snapshot(
        generation=generation,
        built_at=time.time(),
        keys_by_digest=MappingProxyType(keys),
        models=MappingProxyType({t: MappingProxyType(m) for t, m in models.items()}),
        breaker=breaker,
        rebuild_at=min(scheduled).timestamp() if scheduled else None,
        denied_providers=denied,
        default_models=MappingProxyType(default_models),
    )
    validate(snapshot)  # before anyone can install it: raises SnapshotInvalid
    return snapshot


async def _apply_preferences(
    session: AsyncSession, models: dict[str, dict[str, ModelSnap]]
) -> dict[str, ModelSnap]:
    """Tenant preferences, resolved once here so requests pay nothing for them: the
    `fallback_model` is appended to the fallbacks of each of the tenant's models of the same
    kind (chat or embedding; not to itself, nor twice); the `default_model` is returned per
    tenant (gateway/requests.py serves it for the name `default`). A preference naming a
    model that is gone is left out, with a warning."""
    defaults: dict[str, ModelSnap] = {}
    for tenant_id, stored in (await session.execute(select(Tenant.id, Tenant.preferences))).all():
        if not stored:
            continue
        tenant_models = models.get(tenant_id, {})
        for field in ("fallback_model", "default_model"):
            name = stored.get(field)
            if name and name not in tenant_models:
                log.warning("tenant_preference_names_no_model", tenant_id=tenant_id, field=field)
        fallback = tenant_models.get(stored.get("fallback_model") or "")
        if fallback is not None:
            for name, model in tenant_models.items():
                if model.embedding == fallback.embedding and fallback.name not in (
                    model.name,
                    *model.fallbacks,
                ):
                    tenant_models[name] = replace(
                        model, fallbacks=(*model.fallbacks, fallback.name)
                    )
        default = tenant_models.get(stored.get("default_model") or "")
        if default is not None:
            defaults[tenant_id] = default
    return defaults


def provider_snap(row: Provider, sealer: Sealer) -> ProviderSnap:
    """A provider row as requests see it (credentials opened); probes and discovery call the
    provider with the same."""
    credentials = open_credentials(row, sealer) or {}
    return ProviderSnap(
        id=row.id,
        slug=row.slug,
        type=row.type,
        base_url=row.base_url,
        api_key=credentials.get("api_key"),
        headers=MappingProxyType(dict(credentials.get("headers") or {})),
        timeout_s=row.timeout_s or DEFAULT_TIMEOUT_S,
        connect_timeout_s=row.connect_timeout_s or DEFAULT_CONNECT_TIMEOUT_S,
        first_token_timeout_s=row.first_token_timeout_s or DEFAULT_FIRST_TOKEN_TIMEOUT_S,
        stream_idle_timeout_s=row.stream_idle_timeout_s or DEFAULT_STREAM_IDLE_TIMEOUT_S,
        api_version=row.api_version,
        region=row.region,
        preset=row.preset,
        tenant_declared=row.declared_by == TENANT_DECLARED,
    )


def _route(
    row: Route,
    providers: dict[str, ProviderSnap],
    denied: frozenset[str],
    exhausted: frozenset[str],
) -> RouteSnap:
    """A route row as requests see it; built disabled when its provider is denied, or has
    resources and every one of them is disabled."""
    provider = providers.get(row.provider_id)
    if provider is None:
        raise SnapshotError(f"route {row.id} names a missing provider {row.provider_id}")
    unavailable = row.provider_id in denied
    route = RouteSnap(
        id=row.id,
        provider=provider,
        upstream_model=row.upstream_model,
        priority=row.priority,
        weight=row.weight,
        tag=row.tag,
        disabled=row.disabled or unavailable or row.provider_id in exhausted,
        position=row.position,
        capabilities=_capabilities(row.capabilities),
        price=_route_price(row.id, row.pricing),
        denied=unavailable,
    )
    return resources.with_variants(route)


def _capabilities(stored: dict[str, Any] | None) -> Capabilities | None:
    if not stored:
        return None
    known = {name: stored[name] for name in _CAPABILITY_FIELDS if name in stored}
    return Capabilities(**known) if known else None


def _route_price(route_id: str, stored: dict[str, Any] | None) -> Price | None:
    if not stored or all(stored.get(bucket) is None for bucket in _BUCKETS):
        return None
    return Price(
        version_id=f"route:{route_id}",
        input=stored.get("input"),
        output=stored.get("output"),
        cached_input=stored.get("cached_input"),
        cache_write=stored.get("cache_write"),
        source="route",
    )


_BUCKETS = ("input", "output", "cached_input", "cache_write")


def _prices_in_force(rows: Iterable[PriceVersion], now: datetime) -> dict[str, Price]:
    latest: dict[str, PriceVersion] = {}
    for row in rows:
        if row.effective_from > now:
            continue
        held = latest.get(row.model_id)
        if held is None or row.effective_from > held.effective_from:
            latest[row.model_id] = row
    return {
        model_id: Price(
            version_id=row.id,
            input=row.input_micros_per_mtok,
            output=row.output_micros_per_mtok,
            cached_input=row.cached_input_micros_per_mtok,
            cache_write=row.cache_write_micros_per_mtok,
            # Versions the price sync wrote from the catalogue say so in the records.
            source="catalogue" if row.source == CATALOGUE_SOURCE else "model",
        )
        for model_id, row in latest.items()
        if not _withdrawn(row)
    }


def _withdrawn(row: PriceVersion) -> bool:
    """A catalogue version without a single price: the price sync withdrew the model's price
    (its routes name different catalogue models), so each route is costed on its own."""
    return row.source == CATALOGUE_SOURCE and all(
        value is None
        for value in (
            row.input_micros_per_mtok,
            row.output_micros_per_mtok,
            row.cached_input_micros_per_mtok,
            row.cache_write_micros_per_mtok,
        )
    )


def _policy(row: RoutingPolicy) -> PolicySnap:
    return PolicySnap(
        id=row.id,
        name=row.name,
        providers=_frozen(row.providers),
        tags=_frozen(row.tags),
        regions=_frozen(row.regions),
        strategy=row.strategy,
    )


def _frozen(values: list[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def _bound(policies: dict[str, PolicySnap], policy_id: str | None) -> PolicySnap | None:
    """The policy a binding names. A binding to a policy that is gone fails the build (the
    last good snapshot stays): dropping it would silently widen the keys' routes."""
    if policy_id is None:
        return None
    policy = policies.get(policy_id)
    if policy is None:
        raise SnapshotError(f"a routing policy binding names a missing policy {policy_id}")
    return policy


def _limits(row: Project | ApiKey) -> Limits:
    return Limits(
        rpm=row.rpm,
        tpm=row.tpm,
        concurrency=row.concurrency,
        monthly_budget_micros=row.monthly_budget_micros,
    )


def _project(row: Project) -> ProjectSnap:
    return ProjectSnap(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        allowed_models=None if row.allowed_models is None else frozenset(row.allowed_models),
        limits=_limits(row),
    )


def _family_status(row: ApiKey, rows: Mapping[str, ApiKey]) -> str:
    """A rotated-out secret answers only while the key it is a secret of is active: a
    disabled or revoked key refuses every secret of it, old ones included."""
    status = row.status
    seen = {row.id}
    parent_id = row.rotated_from_id
    while status == "active" and parent_id is not None and parent_id not in seen:
        parent = rows.get(parent_id)
        if parent is None:
            break
        seen.add(parent_id)
        status = parent.status
        parent_id = parent.rotated_from_id
    return status


def _scopes(row: ApiKey, rows: Mapping[str, ApiKey]) -> frozenset[str] | None:
    """The APIs a key may call. A rotated-out secret follows the key it is a secret of, so
    narrowing a key's scopes narrows its old secret's within the same reload."""
    owner = rows.get(row.rotated_from_id) if row.rotated_from_id is not None else None
    scopes = (owner or row).scopes
    return None if scopes is None else frozenset(scopes)


def _key(
    row: ApiKey,
    project: ProjectSnap,
    policy: PolicySnap | None,
    guard: Guard | None,
    prepaid: bool = False,
    status: str | None = None,
    scopes: frozenset[str] | None = None,
) -> KeySnap:
    own = None if row.allowed_models is None else frozenset(row.allowed_models)
    if own is None:
        allowed = project.allowed_models
    elif project.allowed_models is None:
        allowed = own
    else:
        allowed = own & project.allowed_models
    return KeySnap(
        id=row.id,
        name=row.name,
        tenant_id=row.tenant_id,
        project=project,
        status=row.status if status is None else status,
        expires_at=None if row.expires_at is None else row.expires_at.timestamp(),
        allowed_models=allowed,
        ip_allowlist=tuple(ipaddress.ip_network(c, strict=False) for c in row.ip_allowlist),
        scopes=scopes,
        limits=_limits(row),
        policy=policy,
        capture=row.capture == CAPTURE_FULL,
        prepaid=prepaid,
        guard=guard,
    )

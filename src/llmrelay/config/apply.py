"""Applying a validated config to the store: an idempotent upsert in one transaction.

Resources named in the file are created or brought in line with it; resources the file does
not name are left alone (routing policies included), except a model's routes, which the file
lists completely. A binding the file leaves out of an entry it names (a project's or key's
`routing_policy`, `routing.policy` of a `routing` section) is cleared. Applying the same file
twice changes no row and does not move the config generation.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay import apikeys
from llmrelay.config.apply_models import upsert_model
from llmrelay.config.apply_rows import (
    ApplyResult,
    GeneratedKey,
    assign,
    existing_or_new,
    note,
    usd_to_micros,
)
from llmrelay.config.loader import ConfigError, check_references
from llmrelay.config.schema import (
    GatewayConfig,
    KeyConfig,
    PolicyConfig,
    ProjectConfig,
    ProviderConfig,
    RoutingConfig,
)
from llmrelay.store.bootstrap import bump_generation, current_generation, ensure_default_tenant
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.models import (
    CAPTURE_OFF,
    ApiKey,
    GatewaySetting,
    Project,
    Provider,
    RoutingPolicy,
    VirtualModel,
    new_id,
)

__all__ = ["ApplyResult", "GeneratedKey", "apply_config", "open_credentials"]


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
        await upsert_model(session, tenant.id, model_config, models, providers, result)
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
    row, created = existing_or_new(
        session,
        existing,
        config.slug,
        lambda: Provider(id=new_id(), tenant_id=tenant_id, slug=config.slug),
    )
    changed = assign(
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
    note(result, "provider", config.slug, created, changed)


def _upsert_policy(
    session: AsyncSession,
    tenant_id: str,
    config: PolicyConfig,
    existing: dict[str, RoutingPolicy],
    result: ApplyResult,
) -> None:
    row, created = existing_or_new(
        session,
        existing,
        config.name,
        lambda: RoutingPolicy(id=new_id(), tenant_id=tenant_id, name=config.name),
    )
    changed = assign(
        row,
        {
            "providers": _optional_list(config.providers),
            "tags": _optional_list(config.tags),
            "regions": _optional_list(config.regions),
            "strategy": None if config.strategy is None else config.strategy.value,
        },
    )
    note(result, "routing policy", config.name, created, changed)


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
    changed = assign(
        row,
        {
            "allowed_models": None if config.models is None else list(config.models),
            "routing_policy_id": _policy_id(config.routing_policy, policies),
            **_limit_values(config),
        },
    )
    note(result, "project", config.name, created, changed)
    keys = {
        k.name: k for k in await session.scalars(select(ApiKey).where(ApiKey.project_id == row.id))
    }
    for key_config in config.keys:
        _upsert_key(
            session,
            row,
            key_config,
            keys.get(key_config.name),
            policies,
            result,
            project_capture=config.capture,
        )


def _upsert_key(
    session: AsyncSession,
    project: Project,
    config: KeyConfig,
    row: ApiKey | None,
    policies: dict[str, RoutingPolicy],
    result: ApplyResult,
    *,
    project_capture: str | None = None,
) -> None:
    """Upsert one key. Its capture mode is its own `capture`, else its project's, else
    "off": resolved here, so the stored key says what it does and applying twice agrees."""
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
        "capture": config.capture or project_capture or CAPTURE_OFF,
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
    changed = assign(row, values)
    if "digest" in changed and not created:
        changed = [c for c in changed if c not in ("prefix", "last_four", "source")]
    note(result, "key", label, created, changed)


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

"""Applying a validated config to the store: an idempotent upsert in one transaction.

Resources named in the file are created or brought in line with it; resources the file does
not name are left alone (routing and guardrail policies included), except a model's routes,
which the file lists completely. A binding the file leaves out of an entry it names (a
project's or key's `routing_policy` or `guardrails`, `routing.policy` of a `routing` section,
`guardrails.global` of a `guardrails` section) is cleared. Applying the same file
twice changes no row and does not move the config generation.

Each resource is written by the admin API's own service (`admin/<domain>/service.py`), so a
file and an API request obey the same rules (a revoked key, for one, stays revoked when the
file says `disabled: false`). What stays here: reading the tenant's rows once, the whole-file
reference check, and the report of what changed.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.guardrails import service as guardrails_service
from llmrelay.admin.keys import service as keys_service
from llmrelay.admin.kit.problems import ServiceError
from llmrelay.admin.policies import service as policies_service
from llmrelay.admin.projects import repository as projects_repository
from llmrelay.admin.projects import service as projects_service
from llmrelay.admin.providers import resource_service
from llmrelay.admin.providers import service as providers_service
from llmrelay.admin.settings import service as settings_service
from llmrelay.config.apply_models import upsert_model
from llmrelay.config.apply_rows import (
    ApplyResult,
    GeneratedKey,
    note,
)
from llmrelay.config.loader import ConfigError, Problem, check_references
from llmrelay.config.schema import (
    GatewayConfig,
    GuardrailPolicyConfig,
    PolicyConfig,
    ProjectConfig,
    ProviderConfig,
)
from llmrelay.store.bootstrap import bump_generation, current_generation, ensure_default_tenant
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import (
    Provider,
    RoutingPolicy,
    VirtualModel,
)
from llmrelay.store.models_guardrails import GuardrailPolicy

__all__ = ["ApplyResult", "GeneratedKey", "apply_config"]


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
    guardrails = {
        g.name: g
        for g in await session.scalars(
            select(GuardrailPolicy).where(GuardrailPolicy.tenant_id == tenant.id)
        )
    }
    problems = list(
        check_references(
            config,
            frozenset(providers),
            frozenset(models),
            frozenset(policies),
            frozenset(guardrails),
        )
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
    if config.guardrails is not None:
        for guardrail_config in config.guardrails.policies:
            _upsert_guardrail(session, tenant.id, guardrail_config, guardrails, result)
        await session.flush()  # bindings below refer to the policies by id
    for index, project_config in enumerate(config.projects):
        try:
            await _upsert_project(session, tenant.id, project_config, policies, result)
        except ServiceError as exc:  # a rule only the database can check (a key in use)
            raise ConfigError(source, [Problem(f"projects[{index}]", exc.message)]) from None
    if config.routing is not None:
        value = settings_service.routing_value(config.routing, policies)
        done = await settings_service.set_routing(session, value)
        if done is not None:
            result.changes.append(f"{done} setting routing")
    if config.guardrails is not None and await guardrails_service.set_global(
        session, config.guardrails.global_policies
    ):
        result.changes.append("updated setting guardrails")

    await session.flush()
    if result.changed:
        result.generation = await bump_generation(session)
    else:
        result.generation = await current_generation(session)
    return result


async def _upsert_provider(
    session: AsyncSession,
    tenant_id: str,
    config: ProviderConfig,
    existing: dict[str, Provider],
    sealer: Sealer,
    result: ApplyResult,
) -> None:
    outcome = providers_service.upsert_provider(
        session, tenant_id, config, existing.get(config.slug), sealer
    )
    existing[config.slug] = outcome.row
    changed = outcome.changed
    if config.resources is not None:
        await session.flush()  # the resources refer to a new provider by id
        done = await resource_service.sync_resources(session, outcome.row, config.resources, sealer)
        if done and not outcome.created:
            changed = [*changed, "resources"]
    note(result, "provider", config.slug, outcome.created, changed)
    await providers_service.reprobe_if_changed(session, outcome.row, outcome.changed)


def _upsert_policy(
    session: AsyncSession,
    tenant_id: str,
    config: PolicyConfig,
    existing: dict[str, RoutingPolicy],
    result: ApplyResult,
) -> None:
    outcome = policies_service.upsert_policy(session, tenant_id, config, existing.get(config.name))
    existing[config.name] = outcome.row
    note(result, "routing policy", config.name, outcome.created, outcome.changed)


def _upsert_guardrail(
    session: AsyncSession,
    tenant_id: str,
    config: GuardrailPolicyConfig,
    existing: dict[str, GuardrailPolicy],
    result: ApplyResult,
) -> None:
    outcome = guardrails_service.upsert_policy(
        session, tenant_id, config, existing.get(config.name)
    )
    existing[config.name] = outcome.row
    note(result, "guardrail policy", config.name, outcome.created, outcome.changed)


async def _upsert_project(
    session: AsyncSession,
    tenant_id: str,
    config: ProjectConfig,
    policies: dict[str, RoutingPolicy],
    result: ApplyResult,
) -> None:
    """The project and the keys it lists, through the same services as the admin API."""
    outcome = await projects_service.upsert_project(session, tenant_id, config, policies)
    note(result, "project", config.name, outcome.created, outcome.changed)
    keys = await projects_repository.keys_by_name(session, outcome.row.id)
    for key_config in config.keys:
        key_outcome, generated = await keys_service.upsert_key(
            session,
            outcome.row,
            key_config,
            keys.get(key_config.name),
            policies,
            project_capture=config.capture,
        )
        label = f"{config.name}/{key_config.name}"
        if generated is not None:
            result.generated_keys.append(GeneratedKey(config.name, key_config.name, generated))
        note(result, "key", label, key_outcome.created, key_outcome.changed)

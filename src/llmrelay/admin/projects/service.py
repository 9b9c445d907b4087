"""The rules of projects, shared by the admin API and `llmrelay apply`: the config schema's
validation (ProjectConfig), references checked by the config loader's own check_references
(allowlisted models, the routing policy, guardrail policies), one name per tenant. Services
flush, never commit: the caller's unit of work commits (and bumps the config generation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.guardrails import service as guardrails
from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import Conflict, Invalid, from_problems, from_validation
from llmrelay.admin.kit.rows import Outcome, assign, micros_to_usd, touch, usd_to_micros
from llmrelay.admin.projects import repository
from llmrelay.config.loader import check_references
from llmrelay.config.schema import GatewayConfig, KeyConfig, ProjectConfig
from llmrelay.store.models import ApiKey, Project, RoutingPolicy, new_id

#: ProjectConfig fields the API does not take on a project (keys have their own routes;
#: `capture` is a key setting the file lets a project give its listed keys).
API_REFUSED = ("keys", "capture")


def limit_values(config: ProjectConfig | KeyConfig) -> dict[str, Any]:
    return {
        "rpm": config.limits.rpm,
        "tpm": config.limits.tpm,
        "concurrency": config.limits.concurrency,
        "monthly_budget_micros": usd_to_micros(config.monthly_budget_usd),
    }


def limit_config(row: Project | ApiKey) -> dict[str, Any]:
    """A row's limits as the config states them (for merging a change into)."""
    limits = {"rpm": row.rpm, "tpm": row.tpm, "concurrency": row.concurrency}
    return {
        "limits": {k: v for k, v in limits.items() if v is not None},
        "monthly_budget_usd": micros_to_usd(row.monthly_budget_micros),
    }


def policy_id(name: str | None, policies: Mapping[str, RoutingPolicy]) -> str | None:
    return None if name is None else policies[name].id


def parse(data: Mapping[str, Any]) -> ProjectConfig:
    """Validate API input with the config schema; 400 naming the field."""
    for name in API_REFUSED:
        if name in data:
            message = "set keys through /projects/{id}/keys" if name == "keys" else "a key setting"
            raise Invalid(f"{name}: {message}", name)
    try:
        return ProjectConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None


async def check(session: AsyncSession, tenant_id: str, config: ProjectConfig) -> None:
    """The references the file checks, against what the tenant has stored."""
    problems = check_references(
        GatewayConfig(projects=[config]),
        known_models=await lookups.model_names(session, tenant_id),
        known_policies=frozenset(await lookups.policies_by_name(session, tenant_id)),
        known_guardrails=await lookups.guardrail_names(session, tenant_id),
    )
    found = from_problems(problems, "projects[0]")
    if found is not None:
        raise found


def assign_project(
    row: Project, config: ProjectConfig, policies: Mapping[str, RoutingPolicy]
) -> list[str]:
    return assign(
        row,
        {
            "name": config.name,
            "allowed_models": None if config.models is None else list(config.models),
            "routing_policy_id": policy_id(config.routing_policy, policies),
            **limit_values(config),
        },
    )


async def upsert_project(
    session: AsyncSession,
    tenant_id: str,
    config: ProjectConfig,
    policies: Mapping[str, RoutingPolicy],
) -> Outcome[Project]:
    """Create the project named in `config` or bring it in line (what apply does)."""
    row = await repository.by_name(session, tenant_id, config.name)
    created = row is None
    if row is None:
        row = Project(id=new_id(), tenant_id=tenant_id, name=config.name)
        session.add(row)
    changed = assign_project(row, config, policies)
    await session.flush()
    changed += await bind_guardrails(session, row, config)
    return Outcome(row, created, [] if created else changed)


async def bind_guardrails(session: AsyncSession, row: Project, config: ProjectConfig) -> list[str]:
    """The project's guardrail bindings as `config` lists them: ["guardrails"] when they
    changed (the project's version moves with them), else []."""
    if not await guardrails.bind(session, row.tenant_id, config.guardrails, project_id=row.id):
        return []
    touch(row)
    await session.flush()
    return ["guardrails"]


async def create_project(session: AsyncSession, tenant_id: str, config: ProjectConfig) -> Project:
    """A new project (the API's create: keys are created through their own route)."""
    parse(config.model_dump(exclude_defaults=True, exclude_none=True))
    await check(session, tenant_id, config)
    if await repository.by_name(session, tenant_id, config.name) is not None:
        raise Conflict(f"name: a project named {config.name!r} exists", "name")
    policies = await lookups.policies_by_name(session, tenant_id)
    return (await upsert_project(session, tenant_id, config, policies)).row


async def current_config(session: AsyncSession, row: Project) -> dict[str, Any]:
    """The project as a config mapping, so a partial change is validated whole."""
    return {
        "name": row.name,
        "models": row.allowed_models,
        "routing_policy": await lookups.policy_name(session, row.routing_policy_id),
        "guardrails": await guardrails.bound_names(session, project_id=row.id),
        **limit_config(row),
    }


async def update_project(
    session: AsyncSession, row: Project, changes: Mapping[str, Any]
) -> list[str]:
    """Apply a partial change: merged into the stored config, validated whole."""
    config = parse({**await current_config(session, row), **changes})
    await check(session, row.tenant_id, config)
    if config.name != row.name and await repository.by_name(session, row.tenant_id, config.name):
        raise Conflict(f"name: a project named {config.name!r} exists", "name")
    policies = await lookups.policies_by_name(session, row.tenant_id)
    changed = assign_project(row, config, policies)
    await session.flush()
    return changed + await bind_guardrails(session, row, config)


async def delete_project(session: AsyncSession, row: Project) -> None:
    """Its keys go with it (they cannot outlive their project)."""
    await session.delete(row)
    await session.flush()

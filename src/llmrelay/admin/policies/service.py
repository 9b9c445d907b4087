"""The rules of routing policies, shared by the admin API and `llmrelay apply`: PolicyConfig's
validation (name, provider slugs, tags, regions, strategy), the providers it lists must exist
(the config loader's check_references), one name per tenant. Bindings hold the policy's id,
so a rename keeps them; a bound policy cannot be deleted (unbinding it silently would widen
the keys' routes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import Conflict, from_problems, from_validation
from llmrelay.admin.kit.rows import Outcome, assign
from llmrelay.admin.policies import repository
from llmrelay.config.loader import check_references
from llmrelay.config.schema import GatewayConfig, PolicyConfig, RoutingConfig
from llmrelay.store.models import RoutingPolicy, new_id


def parse(data: Mapping[str, Any]) -> PolicyConfig:
    try:
        return PolicyConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None


async def check(session: AsyncSession, tenant_id: str, config: PolicyConfig) -> None:
    problems = check_references(
        GatewayConfig(routing=RoutingConfig(policies=[config])),
        known_providers=frozenset(await lookups.providers_by_slug(session, tenant_id)),
    )
    found = from_problems(problems, "routing.policies[0]")
    if found is not None:
        raise found


def _optional(values: list[str] | None) -> list[str] | None:
    return None if values is None else list(values)


def upsert_policy(
    session: AsyncSession, tenant_id: str, config: PolicyConfig, row: RoutingPolicy | None
) -> Outcome[RoutingPolicy]:
    """Create or bring one policy in line with `config` (what apply does)."""
    created = row is None
    if row is None:
        row = RoutingPolicy(id=new_id(), tenant_id=tenant_id, name=config.name)
        session.add(row)
    changed = assign(
        row,
        {
            "name": config.name,
            "providers": _optional(config.providers),
            "tags": _optional(config.tags),
            "regions": _optional(config.regions),
            "strategy": None if config.strategy is None else config.strategy.value,
        },
    )
    return Outcome(row, created, [] if created else changed)


async def create_policy(
    session: AsyncSession, tenant_id: str, config: PolicyConfig
) -> RoutingPolicy:
    await check(session, tenant_id, config)
    if await repository.by_name(session, tenant_id, config.name) is not None:
        raise Conflict(f"name: a routing policy named {config.name!r} exists", "name")
    row = upsert_policy(session, tenant_id, config, None).row
    await session.flush()
    return row


def current_config(row: RoutingPolicy) -> dict[str, Any]:
    stored = {
        "name": row.name,
        "providers": row.providers,
        "tags": row.tags,
        "regions": row.regions,
        "strategy": row.strategy,
    }
    return {k: v for k, v in stored.items() if v is not None}


async def update_policy(
    session: AsyncSession, row: RoutingPolicy, changes: Mapping[str, Any]
) -> list[str]:
    config = parse({**current_config(row), **changes})
    await check(session, row.tenant_id, config)
    if config.name != row.name and await repository.by_name(session, row.tenant_id, config.name):
        raise Conflict(f"name: a routing policy named {config.name!r} exists", "name")
    changed = upsert_policy(session, row.tenant_id, config, row).changed
    await session.flush()
    return changed


async def delete_policy(session: AsyncSession, row: RoutingPolicy) -> None:
    bound = await repository.bindings(session, row.id)
    if bound:
        raise Conflict(f"still bound by {', '.join(bound)}")
    await session.delete(row)
    await session.flush()

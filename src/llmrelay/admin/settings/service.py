"""The rules of the gateway-wide `routing` setting, shared by the admin API and `llmrelay
apply`: BreakerConfig's validation (failures 1-1000, cooldowns > 0, max >= cooldown) and the
global routing policy binding, a policy of the default tenant (the one the file writes).
Routing policies themselves have their own resource; `policies` is refused here.

The setting has no version column: its ETag is a digest of the stored value, checked inside
the change's transaction (a concurrent change between that check and the commit is possible
on PostgreSQL, but both writers then had read the same value)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import Invalid, from_validation
from llmrelay.config.schema import RoutingConfig
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.models import GatewaySetting, RoutingPolicy

ROUTING = "routing"


def routing_value(config: RoutingConfig, policies: Mapping[str, RoutingPolicy]) -> dict[str, Any]:
    """The stored `routing` value: the breaker, and the global policy binding when there is
    one (left out otherwise, so a value stored before bindings existed stays the same)."""
    value: dict[str, Any] = {"breaker": config.breaker.model_dump(mode="json")}
    if config.policy is not None:
        value["policy_id"] = policies[config.policy].id
    return value


async def set_routing(session: AsyncSession, value: dict[str, Any]) -> str | None:
    """Store the value: "created" or "updated", or None when it was already that (so applying
    a file twice changes nothing)."""
    row = await session.get(GatewaySetting, ROUTING)
    if row is None:
        session.add(GatewaySetting(key=ROUTING, value=value))
        done = "created"
    elif row.value != value:
        row.value = value
        done = "updated"
    else:
        return None
    await session.flush()
    return done


def tag(value: Mapping[str, Any] | None) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


async def stored(session: AsyncSession) -> dict[str, Any] | None:
    row = await session.get(GatewaySetting, ROUTING)
    return None if row is None else dict(row.value)


async def current_config(session: AsyncSession) -> dict[str, Any]:
    value = await stored(session) or {}
    config: dict[str, Any] = {"breaker": value.get("breaker") or {}}
    name = await lookups.policy_name(session, value.get("policy_id"))
    if name is not None:
        config["policy"] = name
    return config


async def replace_routing(session: AsyncSession, data: Mapping[str, Any]) -> str | None:
    """PUT semantics: `breaker` (defaults for what is left out) and `policy` (a routing
    policy of the default tenant; left out: no global binding)."""
    if "policies" in data:
        raise Invalid("policies: manage routing policies through /policies", "policies")
    try:
        config = RoutingConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None
    tenant = await ensure_default_tenant(session)
    policies = await lookups.policies_by_name(session, tenant.id)
    if config.policy is not None and config.policy not in policies:
        raise Invalid(f"policy: unknown routing policy {config.policy!r}", "policy")
    return await set_routing(session, routing_value(config, policies))

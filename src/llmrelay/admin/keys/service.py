"""The rules of API keys, shared by the admin API and `llmrelay apply`: KeyConfig's validation
(name, a fixed key of at least 20 characters without whitespace, CIDRs, expiry in UTC,
capture mode), references checked by the config loader (allowlisted models, routing policy,
guardrail policies),
one name per project, one digest in the whole database. Only the digest, a display prefix and
the last four characters are stored; a generated key is returned once, to be shown once.

A revoked key stays revoked: neither a re-applied file nor a change through the API brings
it back (issue a new key instead)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay import apikeys
from llmrelay.admin.guardrails import service as guardrails
from llmrelay.admin.keys import repository
from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import Conflict, Invalid, from_problems, from_validation
from llmrelay.admin.kit.rows import Outcome, assign, touch
from llmrelay.admin.projects.service import limit_config, limit_values, policy_id
from llmrelay.config.loader import check_references
from llmrelay.config.schema import GatewayConfig, KeyConfig, ProjectConfig
from llmrelay.store.models import CAPTURE_OFF, ApiKey, Project, RoutingPolicy, new_id
from llmrelay.store.types import utcnow

ACTIVE, DISABLED, REVOKED = "active", "disabled", "revoked"
STATUSES = (ACTIVE, DISABLED, REVOKED)
#: The longest a rotated-out key may keep working.
MAX_GRACE_S = 7 * 24 * 3600


@dataclass(slots=True)
class IssuedKey:
    """A key row and its secret: the only moment the secret exists outside the client."""

    row: ApiKey
    secret: str


def parse(data: Mapping[str, Any]) -> KeyConfig:
    try:
        return KeyConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None


async def check(session: AsyncSession, tenant_id: str, config: KeyConfig) -> None:
    problems = check_references(
        GatewayConfig(projects=[ProjectConfig(name="p", keys=[config])]),
        known_models=await lookups.model_names(session, tenant_id),
        known_policies=frozenset(await lookups.policies_by_name(session, tenant_id)),
        known_guardrails=await lookups.guardrail_names(session, tenant_id),
    )
    found = from_problems(problems, "projects[0].keys[0]")
    if found is not None:
        raise found


def _values(
    row: ApiKey,
    config: KeyConfig,
    policies: Mapping[str, RoutingPolicy],
    project_capture: str | None,
) -> dict[str, Any]:
    status = DISABLED if config.disabled else ACTIVE
    return {
        "name": config.name,
        "status": REVOKED if row.status == REVOKED else status,
        "expires_at": config.expires_at,
        "allowed_models": None if config.models is None else list(config.models),
        "ip_allowlist": list(config.ip_allowlist),
        "scopes": None if config.scopes is None else list(config.scopes),
        "routing_policy_id": policy_id(config.routing_policy, policies),
        "capture": config.capture or project_capture or CAPTURE_OFF,
        **limit_values(config),
    }


def _secret_values(secret: str) -> dict[str, Any]:
    shown = apikeys.display(secret)
    return {"digest": apikeys.digest(secret), "prefix": shown.prefix, "last_four": shown.last_four}


async def _check_digest(session: AsyncSession, secret: str, key_id: str | None) -> None:
    if await repository.digest_taken(session, apikeys.digest(secret), key_id):
        raise Conflict("key: this key is already in use", "key")


async def upsert_key(
    session: AsyncSession,
    project: Project,
    config: KeyConfig,
    row: ApiKey | None,
    policies: Mapping[str, RoutingPolicy],
    *,
    project_capture: str | None = None,
    source: str = "config",
) -> tuple[Outcome[ApiKey], str | None]:
    """Create or bring one key in line with `config` (what apply does). Returns the outcome
    and the secret when one was generated (to be shown once). The key's capture mode is its
    own, else its project's (in the file), else "off": resolved here, so the stored key says
    what it does and applying twice agrees."""
    created = row is None
    secret = config.key
    generated = None
    if secret is None and created:
        secret = generated = apikeys.generate_key()
    if secret is not None and (row is None or apikeys.digest(secret) != row.digest):
        await _check_digest(session, secret, None if row is None else row.id)
    if row is None:
        row = ApiKey(
            id=new_id(),
            tenant_id=project.tenant_id,
            project_id=project.id,
            name=config.name,
            status=ACTIVE,
        )
        session.add(row)
    values = _values(row, config, policies, project_capture)
    if generated is not None:
        values["source"] = "generated" if source == "config" else source
    elif secret is not None:
        values["source"] = source
    if secret is not None:
        values.update(_secret_values(secret))
    changed = assign(row, values)
    if "digest" in changed and not created:
        changed = [c for c in changed if c not in ("prefix", "last_four", "source")]
    await session.flush()
    changed += await bind_guardrails(session, row, config)
    return Outcome(row, created, [] if created else changed), generated


async def bind_guardrails(session: AsyncSession, row: ApiKey, config: KeyConfig) -> list[str]:
    """The key's guardrail bindings as `config` lists them: ["guardrails"] when they
    changed (the key's version moves with them), else []."""
    if not await guardrails.bind(session, row.tenant_id, config.guardrails, key_id=row.id):
        return []
    touch(row)
    await session.flush()
    return ["guardrails"]


async def create_key(
    session: AsyncSession, project: Project, config: KeyConfig, *, source: str = "api"
) -> IssuedKey:
    await check(session, project.tenant_id, config)
    if await repository.by_name(session, project.id, config.name) is not None:
        raise Conflict(f"name: project {project.name!r} has a key named {config.name!r}", "name")
    policies = await lookups.policies_by_name(session, project.tenant_id)
    outcome, generated = await upsert_key(session, project, config, None, policies, source=source)
    return IssuedKey(outcome.row, generated or config.key or "")


async def current_config(session: AsyncSession, row: ApiKey) -> dict[str, Any]:
    return {
        "name": row.name,
        "models": row.allowed_models,
        "ip_allowlist": row.ip_allowlist,
        "scopes": row.scopes,
        "expires_at": row.expires_at,
        "disabled": row.status == DISABLED,
        "routing_policy": await lookups.policy_name(session, row.routing_policy_id),
        "capture": row.capture,
        "guardrails": await guardrails.bound_names(session, key_id=row.id),
        **limit_config(row),
    }


async def update_key(
    session: AsyncSession, row: ApiKey, project: Project, changes: Mapping[str, Any]
) -> list[str]:
    """A partial change, validated whole. The secret is not changed here (rotate does)."""
    if "key" in changes:
        raise Invalid("key: a key's secret changes only by rotation", "key")
    if row.status == REVOKED and changes.get("disabled") is False:
        raise Invalid("disabled: a revoked key stays revoked; issue a new one", "disabled")
    config = parse({**await current_config(session, row), **changes})
    await check(session, row.tenant_id, config)
    if config.name != row.name and await repository.by_name(session, project.id, config.name):
        raise Conflict(f"name: project {project.name!r} has a key named {config.name!r}", "name")
    policies = await lookups.policies_by_name(session, row.tenant_id)
    changed = assign(row, _values(row, config, policies, None))
    await session.flush()
    return changed + await bind_guardrails(session, row, config)


async def rotate_key(session: AsyncSession, row: ApiKey, grace_s: int) -> IssuedKey:
    """A new secret for the same key (its id, limits and usage stay). The old secret stops at
    once, or after `grace_s` seconds: then it lives on in a row named "<name> rotated <time>"
    that expires then, tied to the key (`rotated_from_id`): revoking, disabling or deleting
    the key ends it too. It can be revoked sooner on its own (that ends only this secret)."""
    if row.status == REVOKED:
        raise Invalid("a revoked key cannot be rotated; issue a new one", "status")
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise Invalid(f"grace_s: between 0 and {MAX_GRACE_S}", "grace_s")
    now = utcnow()
    old_digest, old_prefix, old_last_four = row.digest, row.prefix, row.last_four
    secret = apikeys.generate_key()
    assign(row, {**_secret_values(secret), "source": "api"})
    await session.flush()
    if grace_s:
        ends = now + timedelta(seconds=grace_s)
        if row.expires_at is not None:
            ends = min(ends, row.expires_at)
        copy = _grace_copy(row, old_digest, old_prefix, old_last_four, ends, now)
        session.add(copy)
        await session.flush()
        await guardrails.copy_bindings(session, row.id, copy.id)
    return IssuedKey(row, secret)


def _grace_copy(
    row: ApiKey, digest: str, prefix: str, last_four: str, ends: datetime, now: datetime
) -> ApiKey:
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    return ApiKey(
        id=new_id(),
        tenant_id=row.tenant_id,
        project_id=row.project_id,
        name=f"{row.name[:170]} rotated {stamp}",
        digest=digest,
        prefix=prefix,
        last_four=last_four,
        status=row.status,
        expires_at=ends,
        allowed_models=row.allowed_models,
        ip_allowlist=list(row.ip_allowlist),
        scopes=None if row.scopes is None else list(row.scopes),
        rpm=row.rpm,
        tpm=row.tpm,
        concurrency=row.concurrency,
        monthly_budget_micros=row.monthly_budget_micros,
        source="api",
        routing_policy_id=row.routing_policy_id,
        capture=row.capture,
        rotated_from_id=row.id,
    )


async def revoke_key(session: AsyncSession, row: ApiKey) -> bool:
    """Revoke for good, with every secret of the key: the rows that keep rotated-out secrets
    alive for their grace period are revoked in the same transaction (each replica's next
    snapshot refuses them all). False when nothing changed."""
    changed = bool(assign(row, {"status": REVOKED}))
    for predecessor in await repository.predecessors(session, row.id):
        changed = bool(assign(predecessor, {"status": REVOKED})) or changed
    await session.flush()
    return changed


async def delete_key(session: AsyncSession, row: ApiKey) -> None:
    await session.delete(row)
    await session.flush()

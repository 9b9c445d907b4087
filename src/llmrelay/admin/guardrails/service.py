"""The rules of guardrail policies, shared by the admin API and `llmrelay apply`: the config
schema's validation (GuardrailPolicyConfig: known detectors, RE2 patterns that compile and
cannot match nothing, word lists, one rule per name), one name per tenant, and bindings.

Bindings hold policy ids (a rename keeps them). A project's or key's bindings are set with
its other fields (`guardrails: [names]`), in the order given; the global binding is the
`guardrails` gateway setting and names policies of the default tenant (the one the file
writes), like the global routing policy. A bound policy cannot be deleted: unbinding it
silently would let through what it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.guardrails import repository
from llmrelay.admin.kit.problems import Conflict, Invalid, from_validation
from llmrelay.admin.kit.rows import Outcome, assign
from llmrelay.config.schema import GuardrailPolicyConfig, GuardrailsConfig
from llmrelay.guardrails.policy import BLOCK, MASK, compile_policy
from llmrelay.guardrails.screen import redact
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.models import new_id
from llmrelay.store.models_guardrails import GuardrailPolicy


def parse(data: Mapping[str, Any]) -> GuardrailPolicyConfig:
    try:
        return GuardrailPolicyConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None


def stored_rules(config: GuardrailPolicyConfig) -> list[dict[str, Any]]:
    """The rules as stored: only what is set (defaults left out, so the stored form is the
    smallest and a file applied twice compares equal)."""
    return [
        rule.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        for rule in config.rules
    ]


def upsert_policy(
    session: AsyncSession,
    tenant_id: str,
    config: GuardrailPolicyConfig,
    row: GuardrailPolicy | None,
) -> Outcome[GuardrailPolicy]:
    """Create or bring one policy in line with `config` (what apply does)."""
    created = row is None
    if row is None:
        row = GuardrailPolicy(id=new_id(), tenant_id=tenant_id, name=config.name, rules=[])
        session.add(row)
    changed = assign(
        row,
        {"name": config.name, "description": config.description, "rules": stored_rules(config)},
    )
    return Outcome(row, created, [] if created else changed)


async def create_policy(
    session: AsyncSession, tenant_id: str, config: GuardrailPolicyConfig
) -> GuardrailPolicy:
    if await repository.by_name(session, tenant_id, config.name) is not None:
        raise Conflict(f"name: a guardrail policy named {config.name!r} exists", "name")
    row = upsert_policy(session, tenant_id, config, None).row
    await session.flush()
    return row


def current_config(row: GuardrailPolicy) -> dict[str, Any]:
    stored = {"name": row.name, "description": row.description, "rules": row.rules}
    return {k: v for k, v in stored.items() if v is not None}


async def update_policy(
    session: AsyncSession, row: GuardrailPolicy, changes: Mapping[str, Any]
) -> list[str]:
    config = parse({**current_config(row), **changes})
    if config.name != row.name and await repository.by_name(session, row.tenant_id, config.name):
        raise Conflict(f"name: a guardrail policy named {config.name!r} exists", "name")
    changed = upsert_policy(session, row.tenant_id, config, row).changed
    await session.flush()
    return changed


async def delete_policy(session: AsyncSession, row: GuardrailPolicy) -> None:
    bound = await repository.bindings_of(session, row.id)
    if bound:
        raise Conflict(f"still bound by {', '.join(bound)}")
    await session.delete(row)
    await session.flush()


# -- bindings -------------------------------------------------------------------------------


async def _ids(
    session: AsyncSession, tenant_id: str, names: Sequence[str], field: str
) -> list[str]:
    policies = await repository.by_names(session, tenant_id)
    for index, name in enumerate(names):
        if name not in policies:
            raise Invalid(f"{field}[{index}]: unknown guardrail policy {name!r}", field)
    return [policies[name].id for name in names]


async def bind(
    session: AsyncSession,
    tenant_id: str,
    names: Sequence[str],
    *,
    project_id: str | None = None,
    key_id: str | None = None,
) -> bool:
    """Bind exactly `names` (in that order) to the project or key; False when it already
    was so."""
    wanted = await _ids(session, tenant_id, names, "guardrails")
    current = await repository.bound_ids(session, project_id=project_id, key_id=key_id)
    if current == wanted:
        return False
    await repository.replace_bindings(session, wanted, project_id=project_id, key_id=key_id)
    return True


async def bound_names(
    session: AsyncSession, *, project_id: str | None = None, key_id: str | None = None
) -> list[str]:
    scope = project_id or key_id or ""
    kwargs = {"project_ids": [scope]} if project_id else {"key_ids": [scope]}
    return (await repository.names_by_scope(session, **kwargs)).get(scope, [])


async def copy_bindings(session: AsyncSession, from_key: str, to_key: str) -> None:
    """The same policies on another key (a rotated-out secret that lives on for its grace
    period must not escape the guardrails of the key it was)."""
    ids = await repository.bound_ids(session, key_id=from_key)
    if ids:
        await repository.replace_bindings(session, ids, key_id=to_key)


# -- the global binding ---------------------------------------------------------------------


async def global_config(session: AsyncSession) -> dict[str, Any]:
    """`{"global": [names]}`, as the YAML's `guardrails` section says it."""
    ids = await repository.global_ids(session)
    tenant = await ensure_default_tenant(session)
    names = {p.id: p.name for p in (await repository.by_names(session, tenant.id)).values()}
    return {"global": [names.get(i, i) for i in ids]}


async def set_global(session: AsyncSession, names: Sequence[str]) -> bool:
    tenant = await ensure_default_tenant(session)
    ids = await _ids(session, tenant.id, names, "global")
    return await repository.set_global_ids(session, ids)


async def replace_global(session: AsyncSession, data: Mapping[str, Any]) -> bool:
    """PUT semantics: `{"global": [names]}` (left out: no global binding)."""
    if "policies" in data:
        raise Invalid("policies: manage guardrail policies through /guardrails", "policies")
    try:
        config = GuardrailsConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None
    return await set_global(session, config.global_policies)


# -- the dry run ----------------------------------------------------------------------------


def dry_run(row: GuardrailPolicy, text: str, scope: str) -> dict[str, Any]:
    """What the policy's rules of `scope` find in `text` (every rule, whatever its action,
    `off` ones excepted), and the text as its mask and block rules would leave it."""
    policy = compile_policy(row.id, row.name, row.rules)
    spans: list[dict[str, Any]] = []
    replaced: list[tuple[int, int, str]] = []
    blocked = False
    for rule in policy.rules:
        applies = rule.request if scope == "request" else rule.response
        if not applies or rule.action == "off":
            continue
        for start, end, kind in rule.find(text):
            spans.append(
                {"rule": rule.name, "detector": kind, "action": rule.action}
                | {"start": start, "end": end}
            )
            if rule.action in (MASK, BLOCK):
                replaced.append((start, end, rule.placeholder_for(kind)))
            blocked = blocked or rule.action == BLOCK
    spans.sort(key=lambda s: (s["start"], -s["end"]))
    return {"spans": spans, "masked": redact(text, replaced), "blocked": blocked}

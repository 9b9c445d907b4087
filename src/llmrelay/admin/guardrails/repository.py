"""The SQL of guardrail policies and their bindings."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import ApiKey, GatewaySetting, Project
from llmrelay.store.models_guardrails import GUARDRAILS_SETTING, GuardrailBinding, GuardrailPolicy


async def get(session: AsyncSession, policy_id: str) -> GuardrailPolicy | None:
    return await session.get(GuardrailPolicy, policy_id)


async def by_name(session: AsyncSession, tenant_id: str, name: str) -> GuardrailPolicy | None:
    found: GuardrailPolicy | None = await session.scalar(
        select(GuardrailPolicy).where(
            GuardrailPolicy.tenant_id == tenant_id, GuardrailPolicy.name == name
        )
    )
    return found


async def by_names(session: AsyncSession, tenant_id: str) -> dict[str, GuardrailPolicy]:
    rows = await session.scalars(
        select(GuardrailPolicy).where(GuardrailPolicy.tenant_id == tenant_id)
    )
    return {row.name: row for row in rows}


async def list_page(
    session: AsyncSession,
    *,
    where: ColumnElement[bool] | None,
    tenant_id: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[GuardrailPolicy], str | None]:
    query = select(GuardrailPolicy)
    if where is not None:
        query = query.where(where)
    if tenant_id is not None:
        query = query.where(GuardrailPolicy.tenant_id == tenant_id)
    return await pages.page(session, query, GuardrailPolicy.id, limit, cursor)


def _scope(project_id: str | None, key_id: str | None) -> ColumnElement[bool]:
    if project_id is not None:
        return GuardrailBinding.project_id == project_id
    return GuardrailBinding.key_id == key_id


async def bound_ids(
    session: AsyncSession, *, project_id: str | None = None, key_id: str | None = None
) -> list[str]:
    """The policy ids bound to one project or key, in their order."""
    rows = await session.scalars(
        select(GuardrailBinding.policy_id)
        .where(_scope(project_id, key_id))
        .order_by(GuardrailBinding.position)
    )
    return list(rows)


async def replace_bindings(
    session: AsyncSession,
    policy_ids: Sequence[str],
    *,
    project_id: str | None = None,
    key_id: str | None = None,
) -> None:
    await session.execute(delete(GuardrailBinding).where(_scope(project_id, key_id)))
    for position, policy_id in enumerate(policy_ids):
        session.add(
            GuardrailBinding(
                policy_id=policy_id, project_id=project_id, key_id=key_id, position=position
            )
        )
    await session.flush()


async def names_by_scope(
    session: AsyncSession, *, project_ids: Iterable[str] = (), key_ids: Iterable[str] = ()
) -> dict[str, list[str]]:
    """Project or key id -> the names of the policies bound to it, in order (one query for
    a page of rows)."""
    projects, keys = set(project_ids), set(key_ids)
    if not projects and not keys:
        return {}
    clause = GuardrailBinding.project_id.in_(projects) | GuardrailBinding.key_id.in_(keys)
    rows = await session.execute(
        select(GuardrailBinding.project_id, GuardrailBinding.key_id, GuardrailPolicy.name)
        .join(GuardrailPolicy, GuardrailPolicy.id == GuardrailBinding.policy_id)
        .where(clause)
        .order_by(GuardrailBinding.position)
    )
    found: dict[str, list[str]] = defaultdict(list)
    for project_id, key_id, name in rows:
        found[str(project_id or key_id)].append(name)
    return dict(found)


async def global_ids(session: AsyncSession) -> list[str]:
    row = await session.get(GatewaySetting, GUARDRAILS_SETTING)
    return list(row.value.get("policy_ids") or ()) if row is not None else []


async def set_global_ids(session: AsyncSession, policy_ids: list[str]) -> bool:
    """Store the global binding; False when it already was that."""
    value = {"policy_ids": policy_ids}
    row = await session.get(GatewaySetting, GUARDRAILS_SETTING)
    if row is None:
        if not policy_ids:
            return False
        session.add(GatewaySetting(key=GUARDRAILS_SETTING, value=value))
    elif row.value != value:
        row.value = value
    else:
        return False
    await session.flush()
    return True


async def bindings_of(session: AsyncSession, policy_id: str) -> list[str]:
    """What binds the policy: projects, keys, the global binding."""
    projects = await session.scalars(
        select(Project.name)
        .join(GuardrailBinding, GuardrailBinding.project_id == Project.id)
        .where(GuardrailBinding.policy_id == policy_id)
    )
    found = [f"project {name}" for name in projects]
    keys = await session.scalars(
        select(ApiKey.name)
        .join(GuardrailBinding, GuardrailBinding.key_id == ApiKey.id)
        .where(GuardrailBinding.policy_id == policy_id)
    )
    found += [f"key {name}" for name in keys]
    if policy_id in await global_ids(session):
        found.append("the global binding (settings/guardrails)")
    return found

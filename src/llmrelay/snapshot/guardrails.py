"""The guardrails part of a snapshot: each stored policy compiled once (its patterns and word
lists), and the guard in force for each key resolved from its bindings (global, its
project's, its own; guardrails/policy.py has the precedence). Keys with the same bindings
share one Guard; a key with no rule in force gets None (one attribute check per request)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.guardrails.custom import PatternError
from llmrelay.guardrails.policy import CompiledPolicy, Guard, compile_policy, guard_for
from llmrelay.store.models import GatewaySetting
from llmrelay.store.models_guardrails import GUARDRAILS_SETTING, GuardrailBinding, GuardrailPolicy


class GuardrailsError(RuntimeError):
    """Stored guardrails that cannot be compiled or name a missing policy."""


class Guards:
    """What the snapshot builder asks: the guard of a key."""

    def __init__(
        self,
        policies: dict[str, CompiledPolicy],
        global_ids: Sequence[str],
        by_project: dict[str, list[str]],
        by_key: dict[str, list[str]],
    ) -> None:
        self._policies = policies
        self._global = tuple(global_ids)
        self._by_project = by_project
        self._by_key = by_key
        self._guards: dict[tuple[tuple[str, ...], ...], Guard | None] = {}

    def for_key(self, project_id: str, key_id: str) -> Guard | None:
        levels = (
            self._global,
            tuple(self._by_project.get(project_id, ())),
            tuple(self._by_key.get(key_id, ())),
        )
        if levels in self._guards:
            return self._guards[levels]
        guard = guard_for([[self._policy(i) for i in level] for level in levels])
        self._guards[levels] = guard
        return guard

    def _policy(self, policy_id: str) -> CompiledPolicy:
        policy = self._policies.get(policy_id)
        if policy is None:  # only the global binding can name one (no foreign key there)
            raise GuardrailsError(f"the guardrails binding names a missing policy {policy_id}")
        return policy


async def load_guards(session: AsyncSession) -> Guards:
    policies: dict[str, CompiledPolicy] = {}
    for row in await session.scalars(select(GuardrailPolicy)):
        try:
            policies[row.id] = compile_policy(row.id, row.name, row.rules)
        except (PatternError, KeyError, TypeError) as exc:
            raise GuardrailsError(f"guardrail policy {row.name!r} ({row.id}): {exc}") from None
    setting = await session.get(GatewaySetting, GUARDRAILS_SETTING)
    global_ids = list(setting.value.get("policy_ids") or ()) if setting is not None else []
    by_project: dict[str, list[str]] = defaultdict(list)
    by_key: dict[str, list[str]] = defaultdict(list)
    bindings = await session.scalars(
        select(GuardrailBinding).order_by(GuardrailBinding.position, GuardrailBinding.id)
    )
    for binding in bindings:
        if binding.project_id is not None:
            by_project[binding.project_id].append(binding.policy_id)
        elif binding.key_id is not None:
            by_key[binding.key_id].append(binding.policy_id)
    return Guards(policies, global_ids, by_project, by_key)

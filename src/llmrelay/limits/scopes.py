"""A key's limit plan (the key's own limits, then its project's), built once per key
snapshot: the request path only looks it up."""

from __future__ import annotations

from typing import Final

from llmrelay.limits.base import Plan, Scope, ScopeKind
from llmrelay.snapshot.model import KeySnap, Limits

_MEMO_MAX: Final = 100_000


class ScopeCache:
    def __init__(self) -> None:
        self._memo: dict[str, tuple[KeySnap, Plan | None]] = {}

    def of(self, principal: KeySnap) -> Plan | None:
        """None when neither the key nor its project has a limit (nothing to admit)."""
        hit = self._memo.get(principal.id)
        if hit is not None and hit[0] is principal:  # a reload makes new KeySnaps
            return hit[1]
        scopes = tuple(
            _scope(kind, holder, limits)
            for kind, holder, limits in (
                (ScopeKind.KEY, principal.id, principal.limits),
                (ScopeKind.PROJECT, principal.project.id, principal.project.limits),
            )
            if _limited(limits)
        )
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        plan = Plan(scopes) if scopes else None
        self._memo[principal.id] = (principal, plan)
        return plan


def _limited(limits: Limits) -> bool:
    return (
        limits.rpm is not None
        or limits.tpm is not None
        or limits.concurrency is not None
        or limits.monthly_budget_micros is not None
    )


def _scope(kind: ScopeKind, holder: str, limits: Limits) -> Scope:
    return Scope(
        kind, holder, limits.rpm, limits.tpm, limits.concurrency, limits.monthly_budget_micros
    )

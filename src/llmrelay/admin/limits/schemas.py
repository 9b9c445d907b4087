"""The limits of one project or key: rpm, tpm, concurrency and the monthly budget (USD)."""

from __future__ import annotations

from typing import Any

from llmrelay.admin.kit.problems import Invalid
from llmrelay.admin.projects.schemas import LimitsOut

__all__ = ["LimitsOut", "limit_changes"]

_FIELDS = ("limits", "monthly_budget_usd")


def limit_changes(body: dict[str, Any]) -> dict[str, Any]:
    """PUT semantics: what the body leaves out is cleared (no limit, no budget)."""
    for name in body:
        if name not in _FIELDS:
            raise Invalid(f"{name}: unknown field (limits, monthly_budget_usd)", name)
    return {
        "limits": body.get("limits") or {},
        "monthly_budget_usd": body.get("monthly_budget_usd"),
    }

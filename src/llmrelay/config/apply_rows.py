"""What every upsert of `llmrelay apply` shares: the result it reports, and setting a row's
fields only where they differ (so applying the same file twice writes nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

MICROS = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    project: str
    name: str
    key: str


@dataclass(slots=True)
class ApplyResult:
    changes: list[str] = field(default_factory=list)
    generated_keys: list[GeneratedKey] = field(default_factory=list)
    generation: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def usd_to_micros(value: Decimal | None) -> int | None:
    if value is None:
        return None
    return int((value * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def assign(row: Any, values: dict[str, Any]) -> list[str]:
    """Set only the attributes that differ, so an unchanged row is never written."""
    changed = []
    for name, value in values.items():
        if getattr(row, name) != value:
            setattr(row, name, value)
            changed.append(name)
    return changed


def note(result: ApplyResult, kind: str, name: str, created: bool, changed: list[str]) -> None:
    if created:
        result.changes.append(f"created {kind} {name}")
    elif changed:
        result.changes.append(f"updated {kind} {name} ({', '.join(sorted(changed))})")

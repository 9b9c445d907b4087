"""Row helpers every domain service shares: set only what differs (so an unchanged row is
never written, its version never moves, and applying a file twice changes nothing), and
turn integer micro-USD back into the USD the config and the API speak."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar

from llmrelay.config.apply_rows import MICROS, assign, usd_to_micros
from llmrelay.store.types import utcnow

__all__ = ["Outcome", "assign", "micros_to_usd", "usd_to_micros"]

R = TypeVar("R")


@dataclass(slots=True)
class Outcome(Generic[R]):
    """What an upsert did to one row: created, or the fields it changed (none: untouched)."""

    row: R
    created: bool
    changed: list[str] = field(default_factory=list)

    @property
    def touched(self) -> bool:
        return self.created or bool(self.changed)


def touch(row: Any) -> None:
    """Mark a row changed when what changed lives in other rows (a model's routes, its
    prices), so its version (the ETag a client holds) moves too."""
    row.updated_at = utcnow()


def micros_to_usd(value: int | None) -> Decimal | None:
    return None if value is None else Decimal(value) / MICROS


def plain(values: dict[str, Any]) -> dict[str, Any]:
    """Drop None values (a config dict with only what is set)."""
    return {k: v for k, v in values.items() if v is not None}

"""The month's recorded spend per key and project: what budgets start from when a process
starts (and when Redis comes back empty)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.limits.base import Limiter, ScopeKind, month_of, month_start
from llmrelay.store import rollups


async def month_spend(engine: AsyncEngine, now: float) -> dict[str, int]:
    """Scope name (`key:ID`, `project:ID`) -> micro-USD recorded since the month began.
    Read from the hourly rollups (the records only for hours not rolled up yet), so a start
    costs the same after a month of traffic as after a minute."""
    since = datetime.fromtimestamp(month_start(now), UTC)
    spend: dict[str, int] = {}
    async with engine.connect() as connection:
        for kind, dimension in ((ScopeKind.KEY, "key_id"), (ScopeKind.PROJECT, "project_id")):
            found = await rollups.cells(
                connection, rollups.Dimensions(), since, None, dimension, with_bins=False
            )
            for (_, holder), cell in found.items():
                micros = cell.sums["cost_micros"]
                if holder and micros:
                    name = f"{kind.value}:{holder}"
                    spend[name] = spend.get(name, 0) + micros
    return spend


async def seed(limiter: Limiter, engine: AsyncEngine, now: float) -> None:
    limiter.seed_spend(month_of(now), await month_spend(engine, now))

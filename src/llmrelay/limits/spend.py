"""The month's recorded spend per key and project, read from the request records: what
budgets start from when a process starts (and when Redis comes back empty)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.limits.base import Limiter, ScopeKind, month_of, month_start
from llmrelay.store.models import RequestRecord


async def month_spend(engine: AsyncEngine, now: float) -> dict[str, int]:
    """Scope name (`key:ID`, `project:ID`) -> micro-USD recorded since the month began.
    Served by the (key_id, created_at) and (project_id, created_at) indexes."""
    since = datetime.fromtimestamp(month_start(now), UTC)
    cost = func.coalesce(func.sum(RequestRecord.cost_micros), 0)
    spend: dict[str, int] = {}
    async with engine.connect() as connection:
        for kind, column in (
            (ScopeKind.KEY, RequestRecord.key_id),
            (ScopeKind.PROJECT, RequestRecord.project_id),
        ):
            query = (
                select(column, cost)
                .where(RequestRecord.created_at >= since, column.is_not(None))
                .group_by(column)
            )
            for holder, micros in await connection.execute(query):
                if micros:
                    spend[f"{kind.value}:{holder}"] = int(micros)
    return spend


async def seed(limiter: Limiter, engine: AsyncEngine, now: float) -> None:
    limiter.seed_spend(month_of(now), await month_spend(engine, now))

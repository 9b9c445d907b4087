"""The SQL of price versions."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.store.models import CATALOGUE_SOURCE, PriceVersion


async def in_force(session: AsyncSession, model_id: str, now: datetime) -> PriceVersion | None:
    found: PriceVersion | None = await session.scalar(
        select(PriceVersion)
        .where(PriceVersion.model_id == model_id, PriceVersion.effective_from <= now)
        .order_by(PriceVersion.effective_from.desc())
        .limit(1)
    )
    return found


async def for_model(session: AsyncSession, model_id: str) -> Sequence[PriceVersion]:
    """Newest first."""
    rows = await session.scalars(
        select(PriceVersion)
        .where(PriceVersion.model_id == model_id)
        .order_by(PriceVersion.effective_from.desc(), PriceVersion.id)
    )
    return rows.all()


async def get(session: AsyncSession, price_id: str) -> PriceVersion | None:
    return await session.get(PriceVersion, price_id)


async def for_models(
    session: AsyncSession, model_ids: Collection[str]
) -> dict[str, list[PriceVersion]]:
    """Price versions of several models (a page), newest first."""
    found: dict[str, list[PriceVersion]] = {model_id: [] for model_id in model_ids}
    if model_ids:
        rows = await session.scalars(
            select(PriceVersion)
            .where(PriceVersion.model_id.in_(model_ids))
            .order_by(PriceVersion.effective_from.desc(), PriceVersion.id)
        )
        for row in rows:
            found[row.model_id].append(row)
    return found


async def drop_future_catalogue(session: AsyncSession, model_id: str, now: datetime) -> None:
    """Delete the model's catalogue versions that have not started (jobs/price_sync.py wrote
    them): an operator's price is never superseded by one."""
    await session.execute(
        delete(PriceVersion).where(
            PriceVersion.model_id == model_id,
            PriceVersion.source == CATALOGUE_SOURCE,
            PriceVersion.effective_from > now,
        )
    )

"""The rules of prices, shared by the admin API and `llmrelay apply`: PricingConfig's
validation (USD per million tokens, not negative, by bucket), stored as integer micro-USD.
A price version is never updated: a change is a new version from its effective time on, so
the cost of past requests keeps the price they were charged. A version may start later
(scheduled), never earlier than now (that would rewrite what past requests cost), and only a
version not yet in force may be deleted. Setting a price also removes the catalogue versions
the price sync scheduled for the model (jobs/price_sync.py): they must not supersede it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import Conflict, Invalid, from_validation
from llmrelay.admin.kit.rows import micros_to_usd, usd_to_micros
from llmrelay.admin.prices import repository
from llmrelay.config.schema import PricingConfig
from llmrelay.store.models import CATALOGUE_SOURCE, PriceVersion, VirtualModel
from llmrelay.store.types import utcnow

#: How far in the past an effective time may be (clock skew between an admin and the server).
BACKDATE_TOLERANCE = timedelta(minutes=5)


def price_values(pricing: PricingConfig) -> dict[str, int | None]:
    return {
        "input_micros_per_mtok": usd_to_micros(pricing.input_per_mtok),
        "output_micros_per_mtok": usd_to_micros(pricing.output_per_mtok),
        "cached_input_micros_per_mtok": usd_to_micros(pricing.cached_input_per_mtok),
        "cache_write_micros_per_mtok": usd_to_micros(pricing.cache_write_per_mtok),
    }


def pricing_config(row: PriceVersion) -> dict[str, Any]:
    stated = {
        "input_per_mtok": micros_to_usd(row.input_micros_per_mtok),
        "output_per_mtok": micros_to_usd(row.output_micros_per_mtok),
        "cached_input_per_mtok": micros_to_usd(row.cached_input_micros_per_mtok),
        "cache_write_per_mtok": micros_to_usd(row.cache_write_micros_per_mtok),
    }
    return {k: v for k, v in stated.items() if v is not None}


async def sync_price(session: AsyncSession, model: VirtualModel, pricing: PricingConfig) -> bool:
    """Add a price version from now when `pricing` differs from the version in force (what
    apply does: applying the same prices twice adds nothing)."""
    wanted = price_values(pricing)
    now = utcnow()
    latest = await repository.in_force(session, model.id, now)
    if (
        latest is not None
        and latest.source != CATALOGUE_SOURCE  # the price sync's: the config's must be its own
        and all(getattr(latest, k) == v for k, v in wanted.items())
    ):
        return False
    await repository.drop_future_catalogue(session, model.id, now)
    session.add(PriceVersion(model_id=model.id, effective_from=now, source="config", **wanted))
    return True


def parse(data: Mapping[str, Any]) -> tuple[PricingConfig, datetime]:
    """A price version from the API: the buckets of PricingConfig and `effective_from`
    (ISO 8601; no zone = UTC; default now)."""
    values = dict(data)
    raw_when = values.pop("effective_from", None)
    try:
        pricing = PricingConfig.model_validate(values)
    except ValidationError as exc:
        raise from_validation(exc) from None
    now = utcnow()
    if raw_when is None:
        return pricing, now
    try:
        when = datetime.fromisoformat(str(raw_when).replace("Z", "+00:00"))
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError):
        raise Invalid("effective_from: not an ISO 8601 time", "effective_from") from None
    if when < now - BACKDATE_TOLERANCE:
        raise Invalid(
            "effective_from: in the past (a price applies from now or later)", "effective_from"
        )
    return pricing, max(when, now)


async def add_price(
    session: AsyncSession, model: VirtualModel, pricing: PricingConfig, effective_from: datetime
) -> PriceVersion:
    if all(v is None for v in price_values(pricing).values()):
        raise Invalid("a price needs at least one bucket (input_per_mtok, ...)")
    await repository.drop_future_catalogue(session, model.id, utcnow())
    row = PriceVersion(
        model_id=model.id, effective_from=effective_from, source="api", **price_values(pricing)
    )
    session.add(row)
    await session.flush()
    return row


async def delete_price(session: AsyncSession, row: PriceVersion) -> None:
    if row.effective_from <= utcnow():
        raise Conflict("a price version in force or past cannot be deleted (add a new one)")
    await session.delete(row)
    await session.flush()

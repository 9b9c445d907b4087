"""Price sync (job kind `price_sync`, periodic: LLMRELAY_PRICE_SYNC_INTERVAL_S, daily): the
bundled catalogue's list prices made explicit as price versions (source "catalogue") for the
virtual models that have no price of their own.

Without a price, a request is costed from the catalogue entry of the upstream model that
served it, looked up per request. Written down as price versions, those prices show in the
admin API's price history, in the snapshot, and in cost-first routing like any other; a
scheduled catalogue price (one that starts later) becomes a scheduled version.

Which models: those with no price version from anyone else ("config" from `llmrelay apply`,
"api" from the admin API) and whose routes without a price of their own all name one
catalogue model (a model routed to gpt-4o on two providers: yes; to gpt-4o and to
claude-sonnet-4: no, each request keeps the price of the route that served it). Prices set
in config or through the API are never touched; a future catalogue version of a model that
has one of its own is removed (the operator's price must not be superseded by a catalogue
change), as the admin API and `apply` do when they set a price.

A version is never edited: a new one starts now when the catalogue's price in force differs
from the model's. When a model stops qualifying (a route to another catalogue model was
added), a version with no prices at all starts now: it withdraws the model price, and each
request is costed per route again (snapshot/builder.py reads it so). Running it twice changes
nothing the second time. A change bumps and announces the config generation.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Final

import structlog
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs.kinds import JobContext, JobKind
from llmrelay.jobs.queue import utc
from llmrelay.jobs.services import Services
from llmrelay.metering.catalogue import Catalogue, bundled
from llmrelay.metering.cost import Price
from llmrelay.snapshot.signals import ConfigPublisher
from llmrelay.store.bootstrap import bump_generation
from llmrelay.store.db import session_factory
from llmrelay.store.models import CATALOGUE_SOURCE, PriceVersion, Route, VirtualModel

log = structlog.get_logger(__name__)

PRICE_SYNC_KIND: Final = "price_sync"
_BUCKETS: Final = (
    "input_micros_per_mtok",
    "output_micros_per_mtok",
    "cached_input_micros_per_mtok",
    "cache_write_micros_per_mtok",
)
Buckets = tuple[int | None, int | None, int | None, int | None]
_NO_PRICE: Final[Buckets] = (None, None, None, None)


@dataclass(frozen=True, slots=True)
class Synced:
    #: Models whose versions changed.
    models: int = 0
    added: int = 0
    removed: int = 0
    #: The generation bumped (announce it); None when nothing changed.
    generation: int | None = None


def buckets(price: Price | None) -> Buckets:
    if price is None:
        return _NO_PRICE
    return (price.input, price.output, price.cached_input, price.cache_write)


def _row_buckets(row: PriceVersion) -> Buckets:
    return (
        row.input_micros_per_mtok,
        row.output_micros_per_mtok,
        row.cached_input_micros_per_mtok,
        row.cache_write_micros_per_mtok,
    )


def _has_own_price(pricing: dict[str, Any] | None) -> bool:
    if not pricing:
        return False
    return any(
        pricing.get(b) is not None for b in ("input", "output", "cached_input", "cache_write")
    )


def catalogue_model(routes: list[Route], catalogue: Catalogue) -> str | None:
    """The one catalogue model every route without its own price names; None when they name
    none, several, or one the catalogue does not know."""
    named = {
        entry.id if (entry := catalogue.model(route.upstream_model)) is not None else None
        for route in routes
        if not _has_own_price(route.pricing)
    }
    if len(named) != 1:
        return None
    return next(iter(named))


async def sync(engine: AsyncEngine, *, now: float, catalogue: Catalogue | None = None) -> Synced:
    """One pass over every virtual model (one transaction)."""
    catalogue = catalogue or bundled()
    at = utc(now)
    models = added = removed = 0
    generation = None
    async with session_factory(engine)() as session, session.begin():
        routes: dict[str, list[Route]] = defaultdict(list)
        for route in await session.scalars(select(Route)):
            routes[route.model_id].append(route)
        versions: dict[str, list[PriceVersion]] = defaultdict(list)
        for row in await session.scalars(select(PriceVersion)):
            versions[row.model_id].append(row)
        for model in await session.scalars(select(VirtualModel)):
            rows = versions.get(model.id, [])
            future = [r for r in rows if r.effective_from > at and r.source == CATALOGUE_SOURCE]
            if any(r.source != CATALOGUE_SOURCE for r in rows):
                gone = future  # an operator's price: ours must not supersede it
                wanted: list[tuple[float, Buckets]] = []
                current = new = _NO_PRICE
            else:
                entry_id = catalogue_model(routes.get(model.id, []), catalogue)
                entry = catalogue.models.get(entry_id) if entry_id is not None else None
                in_force = [r for r in rows if r.effective_from <= at]
                held = max(in_force, key=lambda r: r.effective_from) if in_force else None
                current = _row_buckets(held) if held is not None else _NO_PRICE
                new = buckets(entry.price_at(now)) if entry is not None else _NO_PRICE
                wanted = [
                    (start, buckets(price))
                    for start, price in (entry.prices if entry is not None else ())
                    if start > now
                ]
                gone = [r for r in future if (_at(r), _row_buckets(r)) not in wanted]
                have = {(_at(r), _row_buckets(r)) for r in future}
                wanted = [w for w in wanted if w not in have]
            changes = len(gone) + len(wanted) + (new != current)
            if not changes:
                continue
            models += 1
            for row in gone:
                await session.execute(delete(PriceVersion).where(PriceVersion.id == row.id))
            removed += len(gone)
            if new != current:  # in force from now (a version never starts in the past)
                session.add(_version(model.id, at, new))
                added += 1
            for start, price in wanted:
                session.add(_version(model.id, utc(start), price))
            added += len(wanted)
            log.info(
                "prices_synced_from_catalogue",
                model=model.name,
                tenant_id=model.tenant_id,
                price=dict(zip(_BUCKETS, new, strict=True)) if new != current else None,
                scheduled=len(wanted),
                removed=len(gone),
            )
        if models:
            generation = await bump_generation(session)
    return Synced(models, added, removed, generation)


def _at(row: PriceVersion) -> float:
    return row.effective_from.timestamp()


def _version(model_id: str, effective_from: Any, values: Buckets) -> PriceVersion:
    return PriceVersion(
        model_id=model_id,
        effective_from=effective_from,
        source=CATALOGUE_SOURCE,
        **dict(zip(_BUCKETS, values, strict=True)),
    )


async def sync_and_announce(
    engine: AsyncEngine,
    publisher: ConfigPublisher | None,
    *,
    now: float,
    catalogue: Catalogue | None = None,
) -> Synced:
    synced = await sync(engine, now=now, catalogue=catalogue)
    if synced.generation is not None and publisher is not None:
        await publisher.publish(synced.generation)
    return synced


async def run(context: JobContext) -> dict[str, Any]:
    services: Services = context.services
    synced = await sync_and_announce(services.engine, services.publisher, now=time.time())
    return {"models": synced.models, "added": synced.added, "removed": synced.removed}


def kind() -> JobKind:
    return JobKind(PRICE_SYNC_KIND, run, max_attempts=3, release_dedupe=False)

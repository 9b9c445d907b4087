"""The price sync on SQLite and PostgreSQL: catalogue prices written as price versions for
the models without a price of their own (scheduled ones as future versions), idempotent,
never touching a price set in config or through the API, and withdrawn when a model's routes
stop naming one catalogue model."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.prices.service import add_price
from llmrelay.config.schema import PricingConfig
from llmrelay.jobs import price_sync
from llmrelay.metering.catalogue import Catalogue, CatalogueModel
from llmrelay.metering.cost import Price
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.store.db import session_factory
from llmrelay.store.models import PriceVersion, VirtualModel
from tests.jobs.ops_support import SEALER, Announced, apply

DAY = 86_400.0
NOW = time.time()
PAST = NOW - 300 * DAY
SOON = float(int((NOW + 10 * DAY) // DAY) * DAY)  # a catalogue date: midnight UTC
CONFIG = """
providers:
  - {slug: up, type: openai_compatible, base_url: "http://127.0.0.1:9/v1"}
  - {slug: up2, type: openai_compatible, base_url: "http://127.0.0.1:9/v1"}
models:
  - name: mini            # two providers, one catalogue model (one of them dated)
    routes:
      - {provider: up, upstream_model: gpt-4o-mini}
      - {provider: up2, upstream_model: gpt-4o-mini-2024-07-18}
  - name: priced          # a price in the config: never touched
    routes: [{provider: up, upstream_model: gpt-4o-mini}]
    pricing: {input_per_mtok: 1, output_per_mtok: 2}
  - name: mixed           # two catalogue models: each request keeps its route's price
    routes:
      - {provider: up, upstream_model: gpt-4o}
      - {provider: up2, upstream_model: claude-sonnet-4}
  - name: house           # not in the catalogue
    routes: [{provider: up, upstream_model: house-model-7b}]
  - name: own-route-price # the route with a price of its own does not count
    routes:
      - {provider: up, upstream_model: claude-sonnet-4, pricing: {input_per_mtok: 5}}
      - {provider: up2, upstream_model: gpt-4o}
"""


def _price(name: str, micros: int) -> Price:
    return Price(f"catalogue:{name}", input=micros, output=micros * 4, cached_input=micros // 2)


def catalogue(mini_now: int, mini_later: int | None) -> Catalogue:
    def entry(name: str, prices: list[tuple[float, Price]]) -> CatalogueModel:
        return CatalogueModel(name, "openai", 128_000, 16_384, ("tools",), tuple(prices))

    mini = [(PAST, _price("gpt-4o-mini", mini_now))]
    if mini_later is not None:
        mini.append((SOON, _price("gpt-4o-mini", mini_later)))
    return Catalogue(
        [
            entry("gpt-4o-mini", mini),
            entry("gpt-4o", [(PAST, _price("gpt-4o", 2_500_000))]),
            entry("claude-sonnet-4", [(PAST, _price("claude-sonnet-4", 3_000_000))]),
        ]
    )


async def _versions(engine: AsyncEngine) -> dict[str, list[tuple[str, float, int | None]]]:
    """model name -> (source, effective_from, input price), oldest first."""
    async with session_factory(engine)() as session:
        rows = await session.execute(
            select(VirtualModel.name, PriceVersion)
            .join(PriceVersion, PriceVersion.model_id == VirtualModel.id)
            .order_by(PriceVersion.effective_from)
        )
        found: dict[str, list[tuple[str, float, int | None]]] = defaultdict(list)
        for name, row in rows:
            found[name].append(
                (row.source, row.effective_from.timestamp(), row.input_micros_per_mtok)
            )
    return dict(found)


async def test_catalogue_prices_become_versions_once(engine: AsyncEngine) -> None:
    await apply(engine, CONFIG)
    announced = Announced(engine)
    before = await _versions(engine)
    assert set(before) == {"priced"}

    synced = await price_sync.sync_and_announce(
        engine, announced.publisher, now=NOW, catalogue=catalogue(150_000, 100_000)
    )
    assert (synced.models, synced.added, synced.removed) == (2, 3, 0)
    assert synced.generation is not None and announced.generations == [synced.generation]
    after = await _versions(engine)
    assert after["priced"] == before["priced"]
    assert "mixed" not in after and "house" not in after
    for name in ("mini", "own-route-price"):
        expected = 150_000 if name == "mini" else 2_500_000
        rows = after[name]
        assert next((source, price) for source, _, price in rows) == ("catalogue", expected)
        assert abs(rows[0][1] - NOW) < 1  # in force from now, never backdated
    assert after["mini"][1] == ("catalogue", SOON, 100_000)  # scheduled as the catalogue says

    again = await price_sync.sync(engine, now=NOW + 60, catalogue=catalogue(150_000, 100_000))
    assert again == price_sync.Synced()  # nothing changed, no generation bumped
    assert await _versions(engine) == after

    # Requests are costed at it, and say it came from the catalogue.
    snapshot = await SnapshotHolder(session_factory(engine), SEALER).load()
    mini = snapshot.model(next(iter(snapshot.models)), "mini")
    assert mini is not None and mini.price is not None
    assert (mini.price.input, mini.price.source) == (150_000, "catalogue")
    assert snapshot.rebuild_at == SOON

    # The catalogue changed: a new version from now; the withdrawn scheduled one is removed.
    changed = await price_sync.sync(engine, now=NOW + 120, catalogue=catalogue(120_000, None))
    assert (changed.models, changed.added, changed.removed) == (1, 1, 1)
    assert [(s, p) for s, _, p in (await _versions(engine))["mini"]] == [
        ("catalogue", 150_000),
        ("catalogue", 120_000),
    ]


async def test_an_operators_price_is_never_touched(engine: AsyncEngine) -> None:
    await apply(engine, CONFIG)
    await price_sync.sync(engine, now=NOW, catalogue=catalogue(150_000, 100_000))
    async with session_factory(engine).begin() as session:
        model = await session.scalar(select(VirtualModel).where(VirtualModel.name == "mini"))
        assert model is not None
        when = datetime.fromtimestamp(time.time() + 5, UTC)
        await add_price(session, model, PricingConfig(input_per_mtok=9, output_per_mtok=9), when)
    rows = (await _versions(engine))["mini"]
    # The scheduled catalogue version would have superseded the operator's: it is gone.
    assert [source for source, _, _ in rows] == ["catalogue", "api"]
    synced = await price_sync.sync(engine, now=time.time() + 10, catalogue=catalogue(1, 2))
    assert synced == price_sync.Synced()
    assert (await _versions(engine))["mini"] == rows

    # The config stating the catalogue's own price still makes it the config's.
    stated = CONFIG.replace(
        "  - name: own-route-price # the route with a price of its own does not count\n",
        "  - name: own-route-price\n    pricing: {input_per_mtok: 2.5, output_per_mtok: 10,"
        " cached_input_per_mtok: 1.25}\n",
    )
    await apply(engine, stated)
    own = (await _versions(engine))["own-route-price"]
    assert [(s, p) for s, _, p in own] == [("catalogue", 2_500_000), ("config", 2_500_000)]
    synced = await price_sync.sync(engine, now=time.time() + 20, catalogue=catalogue(7, 8))
    assert synced == price_sync.Synced()


async def test_a_model_whose_routes_diverge_loses_its_catalogue_price(engine: AsyncEngine) -> None:
    await apply(engine, CONFIG)
    await price_sync.sync(engine, now=time.time(), catalogue=catalogue(150_000, None))
    diverged = CONFIG.replace(
        "      - {provider: up2, upstream_model: gpt-4o-mini-2024-07-18}",
        "      - {provider: up2, upstream_model: gpt-4o}",
    )
    await apply(engine, diverged)
    synced = await price_sync.sync(engine, now=time.time(), catalogue=catalogue(150_000, None))
    assert (synced.models, synced.added) == (1, 1)
    rows = (await _versions(engine))["mini"]
    assert [(s, p) for s, _, p in rows] == [("catalogue", 150_000), ("catalogue", None)]
    snapshot = await SnapshotHolder(session_factory(engine), SEALER).load()
    mini = snapshot.model(next(iter(snapshot.models)), "mini")
    assert mini is not None and mini.price is None  # each route costed from the catalogue again
    assert await price_sync.sync(engine, now=time.time(), catalogue=catalogue(150_000, None)) == (
        price_sync.Synced()
    )

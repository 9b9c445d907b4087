"""The bundled catalogue: loads from the installed package, matches dated snapshots,
versions prices by date."""

from __future__ import annotations

from datetime import UTC, datetime

from llmrelay.metering.catalogue import bundled


def _at(year: int, month: int, day: int) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()


def test_every_entry_has_a_price_in_micros_per_million_tokens() -> None:
    catalogue = bundled()
    assert len(catalogue.models) >= 10
    for model in catalogue.models.values():
        assert model.prices, model.id
        for _, price in model.prices:
            assert price.input is not None and price.output is not None, model.id
            assert price.source == "catalogue"
            assert price.version_id.startswith(f"catalogue:{model.id}@")


def test_a_dated_snapshot_gets_its_models_price_and_the_longest_id_wins() -> None:
    catalogue = bundled()
    mini = catalogue.price("gpt-4o-mini-2024-07-18", _at(2026, 1, 1))
    assert mini is not None and (mini.input, mini.output, mini.cached_input) == (
        150_000,
        600_000,
        75_000,
    )
    full = catalogue.price("gpt-4o-2024-08-06", _at(2026, 1, 1))
    assert full is not None and full.input == 2_500_000
    assert catalogue.price("models/gemini-2.5-flash", _at(2026, 1, 1)) is not None
    assert catalogue.price("gpt-4omni", _at(2026, 1, 1)) is None  # no separator: another model
    assert catalogue.price("my-own-model", _at(2026, 1, 1)) is None


def test_prices_are_versioned_by_their_effective_date() -> None:
    catalogue = bundled()
    before = catalogue.price("o3", _at(2025, 5, 1))
    after = catalogue.price("o3", _at(2025, 7, 1))
    assert before is not None and after is not None
    assert before.input == 10_000_000 and after.input == 2_000_000
    assert before.version_id != after.version_id
    assert catalogue.price("o3", _at(2024, 1, 1)) is None  # before it was sold

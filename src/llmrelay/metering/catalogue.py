"""The bundled model catalogue (catalogue.yaml): list prices with the date each took effect,
and what each model can do. Read once per process, on first use (it is small)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from llmrelay.metering.cost import Price

_PREFIX_SEPARATORS = ("-", "@", ":")
#: Prefixes some servers put before a model id (OpenRouter-style and Gemini's REST names).
_NAMESPACES = ("models/", "openai/", "anthropic/", "google/")


@dataclass(frozen=True, slots=True)
class CatalogueModel:
    id: str
    provider: str
    context_window: int | None
    max_output: int | None
    capabilities: tuple[str, ...]
    #: (effective from, as a Unix timestamp; its price), oldest first
    prices: tuple[tuple[float, Price], ...]

    def price_at(self, at: float) -> Price | None:
        starts = [start for start, _ in self.prices]
        index = bisect.bisect_right(starts, at) - 1
        return self.prices[index][1] if index >= 0 else None


def _micros(usd: Any) -> int | None:
    if usd is None:
        return None
    return int(Decimal(str(usd)) * 1_000_000)


def _entry(raw: dict[str, Any]) -> CatalogueModel:
    prices = []
    for period in raw["prices"]:
        start: date = period["from"]
        at = datetime(start.year, start.month, start.day, tzinfo=UTC)
        version = f"catalogue:{raw['id']}@{start.isoformat()}"
        price = Price(
            version_id=version,
            input=_micros(period.get("input")),
            output=_micros(period.get("output")),
            cached_input=_micros(period.get("cached_input")),
            cache_write=_micros(period.get("cache_write")),
            source="catalogue",
        )
        prices.append((at.timestamp(), price))
    prices.sort(key=lambda pair: pair[0])
    return CatalogueModel(
        id=raw["id"],
        provider=raw["provider"],
        context_window=raw.get("context_window"),
        max_output=raw.get("max_output"),
        capabilities=tuple(raw.get("capabilities", ())),
        prices=tuple(prices),
    )


class Catalogue:
    def __init__(self, models: list[CatalogueModel]) -> None:
        self.models = {m.id: m for m in models}
        self._matches: dict[str, CatalogueModel | None] = {}

    def model(self, upstream_model: str) -> CatalogueModel | None:
        """The entry for an upstream model id: exact, else the longest id that is a prefix
        of it up to a separator (a dated snapshot of that model). Cached per id."""
        if upstream_model in self._matches:
            return self._matches[upstream_model]
        name = upstream_model
        for namespace in _NAMESPACES:
            if name.startswith(namespace):
                name = name[len(namespace) :]
        found = self.models.get(name)
        if found is None:
            best = ""
            for candidate in self.models:
                if (
                    len(candidate) > len(best)
                    and name.startswith(candidate)
                    and name[len(candidate)] in _PREFIX_SEPARATORS
                ):
                    best = candidate
            found = self.models.get(best)
        if len(self._matches) < 10_000:
            self._matches[upstream_model] = found
        return found

    def price(self, upstream_model: str, at: float) -> Price | None:
        entry = self.model(upstream_model)
        return None if entry is None else entry.price_at(at)


@cache
def bundled() -> Catalogue:
    import yaml  # here: only the first call parses the file (and a serving process may not)

    text = resources.files("llmrelay.metering").joinpath("catalogue.yaml").read_text("utf-8")
    raw = yaml.safe_load(text)
    return Catalogue([_entry(item) for item in raw["models"]])

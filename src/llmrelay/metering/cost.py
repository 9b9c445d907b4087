"""What a request cost: integer micro-USD per bucket, from one price version.

Prices are micro-USD per million tokens (integers), so a bucket's cost is
`tokens * price / 1_000_000` rounded half up, in integers only: no float ever touches money.
The total is the sum of the rounded buckets, so the buckets always add up to it.

A bucket the price does not name is charged as plain input when it is a cache bucket (the
dearest reading, never a free one); usage in a bucket with no price at all makes the whole
cost unknown: recorded as 0 with `price_source = "unknown"`, never left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmrelay.metering.usage import Usage

MICROS_PER_USD = 1_000_000
_PER_MTOK = 1_000_000

#: Where a price came from, as the record stores it.
SOURCE_UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Price:
    """Micro-USD per million tokens by bucket, from one price version."""

    version_id: str
    input: int | None
    output: int | None
    cached_input: int | None = None
    cache_write: int | None = None
    #: "model" (the model's price in config or the admin API), "route" (a route's own),
    #: or "catalogue" (the bundled catalogue)
    source: str = "model"


@dataclass(frozen=True, slots=True)
class Cost:
    input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0
    #: The price version used; None with source "unknown".
    version_id: str | None = None
    source: str = SOURCE_UNKNOWN

    @property
    def total(self) -> int:
        return self.input + self.cached_input + self.cache_write + self.output


UNKNOWN = Cost()


def _bucket(tokens: int, per_mtok: int) -> int:
    return (tokens * per_mtok + _PER_MTOK // 2) // _PER_MTOK


def cost_of(usage: Usage | None, price: Price | None) -> Cost:
    """The cost of `usage` at `price`; UNKNOWN (all zero) when either is missing or a used
    bucket has no price. No usage at all (an error before any output) costs 0 at the price."""
    if price is None:
        return UNKNOWN
    if usage is None:
        return Cost(version_id=price.version_id, source=price.source)
    input_price = price.input
    cached_price = price.cached_input if price.cached_input is not None else input_price
    write_price = price.cache_write if price.cache_write is not None else input_price
    parts = []
    for tokens, per_mtok in (
        (usage.input, input_price),
        (usage.cached_input, cached_price),
        (usage.cache_write, write_price),
        (usage.output, price.output),
    ):
        if not tokens:
            parts.append(0)
        elif per_mtok is None:
            return UNKNOWN
        else:
            parts.append(_bucket(tokens, per_mtok))
    return Cost(parts[0], parts[1], parts[2], parts[3], price.version_id, price.source)


def micros_to_usd(micros: int) -> float:
    """For display only (the API's `cost_usd`); sums are kept in micros."""
    return micros / MICROS_PER_USD

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
from typing import Final

from llmrelay.metering.usage import Usage

MICROS_PER_USD: Final = 1_000_000
_PER_MTOK: Final = 1_000_000
_HALF: Final = _PER_MTOK // 2  # rounding half up

#: Where a price came from, as the record stores it.
SOURCE_UNKNOWN: Final = "unknown"


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


class Cost:
    """Micro-USD per bucket and the price version used. A plain slotted class, not a frozen
    dataclass: one is made per request, and a frozen dataclass's __init__ costs about a
    microsecond more. Treat it as immutable."""

    __slots__ = ("cache_write", "cached_input", "input", "output", "source", "total", "version_id")

    def __init__(
        self,
        input: int = 0,
        cached_input: int = 0,
        cache_write: int = 0,
        output: int = 0,
        version_id: str | None = None,
        source: str = SOURCE_UNKNOWN,
    ) -> None:
        self.input = input
        self.cached_input = cached_input
        self.cache_write = cache_write
        self.output = output
        self.total = input + cached_input + cache_write + output
        #: The price version used; None with source "unknown".
        self.version_id = version_id
        self.source = source

    def __repr__(self) -> str:
        return (
            f"Cost(input={self.input}, cached_input={self.cached_input}, "
            f"cache_write={self.cache_write}, output={self.output}, "
            f"version_id={self.version_id!r}, source={self.source!r})"
        )


UNKNOWN: Final = Cost()


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
    output_price = price.output
    fresh, cached, written, output = (
        usage.input,
        usage.cached_input,
        usage.cache_write,
        usage.output,
    )
    if (
        (fresh and input_price is None)
        or (cached and cached_price is None)
        or (written and write_price is None)
        or (output and output_price is None)
    ):
        return UNKNOWN
    return Cost(
        (fresh * input_price + _HALF) // _PER_MTOK if fresh else 0,  # type: ignore[operator]
        (cached * cached_price + _HALF) // _PER_MTOK if cached else 0,  # type: ignore[operator]
        (written * write_price + _HALF) // _PER_MTOK if written else 0,  # type: ignore[operator]
        (output * output_price + _HALF) // _PER_MTOK if output else 0,  # type: ignore[operator]
        price.version_id,
        price.source,
    )


def cost_plus(one: Cost, other: Cost) -> Cost:
    """Two costs summed bucket by bucket (the parts of one answer, each priced at its
    route's price: a rescued stream), under the second's price version."""
    return Cost(
        one.input + other.input,
        one.cached_input + other.cached_input,
        one.cache_write + other.cache_write,
        one.output + other.output,
        other.version_id,
        other.source,
    )


def micros_to_usd(micros: int) -> float:
    """For display only (the API's `cost_usd`); sums are kept in micros."""
    return micros / MICROS_PER_USD

"""Cost arithmetic: integer micro-USD per bucket, summed exactly, never a float."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from llmrelay.metering.cost import UNKNOWN, Price, cost_of
from llmrelay.metering.usage import Usage

# USD 2.50 / 1.25 / 3.125 / 10 per million tokens, in micro-USD per million tokens.
PRICE = Price(
    "v7", input=2_500_000, output=10_000_000, cached_input=1_250_000, cache_write=3_125_000
)

tokens = st.integers(min_value=0, max_value=10_000_000_000)
per_mtok = st.integers(min_value=0, max_value=1_000_000_000)


def test_each_bucket_is_priced_apart_and_the_total_is_their_sum() -> None:
    cost = cost_of(Usage(input=1_000, output=500, cached_input=4_000, cache_write=200), PRICE)
    # 1000 * 2.5 = 2500; 4000 * 1.25 = 5000; 200 * 3.125 = 625; 500 * 10 = 5000 micro-USD
    assert (cost.input, cost.cached_input, cost.cache_write, cost.output) == (2500, 5000, 625, 5000)
    assert cost.total == 13_125
    assert (cost.version_id, cost.source) == ("v7", "model")


def test_a_cache_bucket_without_its_own_price_is_charged_as_input() -> None:
    price = Price("v1", input=3_000_000, output=15_000_000)
    cost = cost_of(Usage(input=10, cached_input=10, cache_write=10, output=0), price)
    assert (cost.input, cost.cached_input, cost.cache_write) == (30, 30, 30)


def test_usage_in_a_bucket_without_a_price_makes_the_cost_unknown_not_partial() -> None:
    price = Price("v1", input=3_000_000, output=None)
    assert cost_of(Usage(input=10, output=1), price) is UNKNOWN
    assert UNKNOWN.total == 0 and UNKNOWN.source == "unknown"
    # no output used: the missing output price does not matter
    assert cost_of(Usage(input=10), price).total == 30


def test_no_price_or_no_usage() -> None:
    assert cost_of(Usage(input=5), None) is UNKNOWN
    nothing = cost_of(None, PRICE)
    assert nothing.total == 0 and nothing.version_id == "v7"


@given(tokens, tokens, tokens, tokens, per_mtok, per_mtok, per_mtok, per_mtok)
def test_integer_costs_match_exact_rational_arithmetic(
    fresh: int,
    cached: int,
    written: int,
    output: int,
    p_in: int,
    p_cached: int,
    p_write: int,
    p_out: int,
) -> None:
    price = Price("v", input=p_in, output=p_out, cached_input=p_cached, cache_write=p_write)
    cost = cost_of(Usage(fresh, output, cached, written), price)
    for got, count, rate in (
        (cost.input, fresh, p_in),
        (cost.cached_input, cached, p_cached),
        (cost.cache_write, written, p_write),
        (cost.output, output, p_out),
    ):
        assert isinstance(got, int)
        exact = Fraction(count * rate, 1_000_000)
        assert abs(Fraction(got) - exact) <= Fraction(1, 2)  # rounded half up, no drift
    assert cost.total == cost.input + cost.cached_input + cost.cache_write + cost.output


@given(st.lists(st.tuples(tokens, tokens), min_size=1, max_size=50))
def test_summing_many_records_drifts_by_at_most_half_a_micro_usd_per_bucket(
    pairs: list[tuple[int, int]],
) -> None:
    price = Price("v", input=150_000, output=600_000)  # gpt-4o-mini
    total = sum(cost_of(Usage(input=i, output=o), price).total for i, o in pairs)
    exact = sum((Fraction(i * 150_000 + o * 600_000, 1_000_000) for i, o in pairs), Fraction(0))
    assert abs(Fraction(total) - exact) <= Fraction(len(pairs) * 2, 2)  # two buckets each

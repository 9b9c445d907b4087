"""The reservation of a prepaid request: the most it can cost on any route it can reach,
from its prompt and its output limit (or the model's catalogue cap, bounded by the setting),
at each route's dearest input price; a route without a price refuses it unless a flat
amount is set."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from llmrelay.billing.errors import Unpriced
from llmrelay.billing.estimate import (
    ReservePolicy,
    input_bound,
    input_tokens,
    reservation,
    route_cost,
)
from llmrelay.gateway.capabilities import price_for
from llmrelay.metering.cost import Price
from llmrelay.snapshot.model import ModelSnap, ProviderSnap, RouteSnap

PROVIDER = ProviderSnap(
    "p", "up", "openai_compatible", "http://x/v1", None, MappingProxyType({}), 5, 5, 5, 5, None
)
CHEAP = Price("v-cheap", input=1_000_000, output=2_000_000)  # 1 and 2 micro-USD a token
DEAR = Price("v-dear", input=3_000_000, output=4_000_000, cache_write=5_000_000)
POLICY = ReservePolicy(default_max_output_tokens=4096)
PAYLOAD = {"messages": [{"role": "user", "content": "one two three four five"}]}


def route(name: str, upstream: str = "echo", price: Price | None = None) -> RouteSnap:
    return RouteSnap(name, PROVIDER, upstream, 0, 1.0, None, False, 0, price=price)


def model(*routes: RouteSnap, price: Price | None = None, name: str = "m") -> ModelSnap:
    return ModelSnap(name, "t", name, "priority", routes, 1, 0, 300.0, (), (), False, price, 0)


def test_the_dearest_reachable_route_sets_the_reservation() -> None:
    tokens_in = input_tokens(PAYLOAD)
    assert tokens_in >= 5  # the words, the message's framing, and a fifth more
    asked = PAYLOAD | {"max_tokens": 100}
    cheap = model(route("a", price=CHEAP))
    assert reservation(asked, [(cheap, cheap.routes)], price_for, 0, POLICY) == (
        tokens_in * 1 + 100 * 2
    )
    both = model(route("a", price=CHEAP), route("b", price=DEAR))
    fallback = model(route("c"), price=CHEAP, name="fallback")  # the model's own price
    reachable = [(both, both.routes), (fallback, fallback.routes)]
    # the dear route: its cache-write price (5) is its dearest input price
    assert reservation(asked, reachable, price_for, 0, POLICY) == tokens_in * 5 + 100 * 4


def test_the_output_limit_and_its_defaults() -> None:
    tokens_in = input_tokens(PAYLOAD)
    cheap = model(route("a", price=CHEAP))
    reachable = [(cheap, cheap.routes)]
    several = PAYLOAD | {"max_completion_tokens": 10, "n": 3}
    assert reservation(several, reachable, price_for, 0, POLICY) == tokens_in + 30 * 2
    responses = PAYLOAD | {"max_output_tokens": 7}
    assert reservation(responses, reachable, price_for, 0, POLICY) == tokens_in + 7 * 2
    # No limit asked: the setting, for a model the catalogue does not know...
    assert reservation(PAYLOAD, reachable, price_for, 0, POLICY) == tokens_in + 4096 * 2
    # ...the catalogue's max_output (16384 for gpt-4o-mini) bounded by the setting...
    known = model(route("k", upstream="gpt-4o-mini", price=CHEAP))
    small = ReservePolicy(default_max_output_tokens=100_000)
    assert reservation(PAYLOAD, [(known, known.routes)], price_for, 0, small) == (
        tokens_in + 16_384 * 2
    )
    # ...and nothing for embeddings.
    assert reservation(PAYLOAD, reachable, price_for, 0, POLICY, generates=False) == tokens_in


def test_a_route_without_a_price_refuses_or_reserves_the_flat_amount() -> None:
    unpriced = model(route("a", price=CHEAP), route("u", upstream="no-such-model"))
    reachable = [(unpriced, unpriced.routes)]
    with pytest.raises(Unpriced, match="no price for its route to 'up'"):
        reservation(PAYLOAD, reachable, price_for, 0, POLICY)
    flat = ReservePolicy(unpriced_reserve_micros=50_000_000)
    assert reservation(PAYLOAD, reachable, price_for, 0, flat) == 50_000_000
    no_output_price = model(route("o", price=Price("v-in", input=1_000_000, output=None)))
    with pytest.raises(Unpriced):
        reservation(PAYLOAD, [(no_output_price, no_output_price.routes)], price_for, 0, POLICY)


def test_a_route_costs_its_dearest_input_bucket_rounded_up() -> None:
    assert route_cost(DEAR, 10, 2) == -(-(10 * 5_000_000 + 2 * 4_000_000) // 1_000_000)
    cached = Price("v-c", input=2, output=3, cached_input=7)
    assert route_cost(cached, 1_000_000, 0) == 7  # the dearest of three input prices
    assert route_cost(cached, 1, 1) == 1  # (7 + 3) micro-units of a micro-USD: rounded up
    no_input = Price("v-o", input=None, output=3, cache_write=9)
    assert route_cost(no_input, 0, 1_000_000) == 3  # no prompt: no input price needed
    assert route_cost(no_input, 1, 0) is None


def test_the_bound_a_request_admitted_in_memory_reserves_covers_the_count() -> None:
    """gateway/prepaid.reserve admits a minted request on input_bound (no regex walk): never
    less than the counted input_tokens, for prose, code, other scripts and punctuation."""
    for text in ("hello there", "x = f(a, b) ** 2  # 1234567", "日本語のテキスト", "!?.,;:" * 9):
        payload = {"messages": [{"role": "user", "content": text}], "system": text}
        assert input_bound(payload) >= input_tokens(payload)

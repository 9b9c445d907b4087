"""Route ordering per strategy: seeded draws checked against the expected shares within a
binomial tolerance, deterministic strategies checked exactly, and a property over random
route lists that no strategy ever returns a disabled route or loses an enabled one."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.routing.strategies import (
    LEAST_TIME_REFRESH_S,
    STRATEGIES,
    InFlight,
    LatencyTracker,
    Router,
)
from llmrelay.snapshot.model import ModelSnap, ProviderSnap, RouteSnap

PROVIDER = ProviderSnap(
    "p", "up", "openai_compatible", "http://x/v1", None, MappingProxyType({}), 5, 5, 5, 5, None
)
OTHER = ProviderSnap(
    "q", "other", "openai_compatible", "http://y/v1", None, MappingProxyType({}), 5, 5, 5, 5, None
)


def _route(
    rid: str,
    priority: int = 0,
    weight: float = 1.0,
    *,
    tag: str | None = None,
    disabled: bool = False,
    position: int = 0,
    provider: ProviderSnap = PROVIDER,
) -> RouteSnap:
    return RouteSnap(rid, provider, "up-model", priority, weight, tag, disabled, position)


def _model(strategy: str, routes: Sequence[RouteSnap]) -> ModelSnap:
    ordered = tuple(sorted(routes, key=lambda r: (r.priority, r.position)))
    return ModelSnap("m", "t", "chat", strategy, ordered, 1, 0, 30.0, (), (), False, None, 0)


def _ids(routes: Sequence[RouteSnap]) -> list[str]:
    return [r.id for r in routes]


def _assert_share(count: int, n: int, p: float, sigmas: float = 4.0) -> None:
    """`count` of `n` draws lies within `sigmas` binomial standard deviations of n*p."""
    sd = math.sqrt(n * p * (1 - p))
    assert abs(count - n * p) <= sigmas * sd, (count, n * p, sd)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- priority ---------------------------------------------------------------------------


def test_priority_draws_the_head_of_each_group_by_weight() -> None:
    routes = [
        _route("a", 0, 3.0, position=0),
        _route("b", 0, 1.0, position=1),
        _route("c", 1, 1.0, position=2),
        _route("d", 1, 1.0, position=3),
    ]
    model = _model("priority", routes)
    router = Router(random.Random(7))
    n = 4000
    heads: Counter[str] = Counter()
    second_group_heads: Counter[str] = Counter()
    for _ in range(n):
        order = _ids(router.order(model))
        assert set(order[:2]) == {"a", "b"}  # the lowest priority group comes first
        assert set(order[2:]) == {"c", "d"}
        heads[order[0]] += 1
        second_group_heads[order[2]] += 1
    _assert_share(heads["a"], n, 0.75)
    _assert_share(second_group_heads["c"], n, 0.5)


def test_priority_rest_of_group_in_declaration_order() -> None:
    routes = [_route(x, 0, 1.0, position=i) for i, x in enumerate("abcd")]
    router = Router(random.Random(3))
    seen = set()
    for _ in range(500):
        order = _ids(router.order(_model("priority", routes)))
        head = order[0]
        assert order[1:] == [x for x in "abcd" if x != head]
        seen.add(head)
    assert seen == set("abcd")


def test_priority_zero_weight_never_heads_a_group_with_weight() -> None:
    routes = [_route("zero", 0, 0.0, position=0), _route("one", 0, 1.0, position=1)]
    router = Router(random.Random(1))
    for _ in range(1000):
        assert _ids(router.order(_model("priority", routes))) == ["one", "zero"]


def test_unknown_strategy_is_priority() -> None:
    routes = [_route("a", 0, 1.0, position=0), _route("b", 0, 2.0, position=1)]
    plain, odd = Router(random.Random(11)), Router(random.Random(11))
    draws = [_ids(plain.order(_model("priority", routes))) for _ in range(200)]
    assert draws == [_ids(odd.order(_model("no-such-thing", routes))) for _ in range(200)]
    assert {d[0] for d in draws} == {"a", "b"}


# -- fixed ------------------------------------------------------------------------------


def test_fixed_is_priority_then_position_and_never_random() -> None:
    routes = [
        _route("late", 1, 5.0, position=0),
        _route("b", 0, 1.0, position=2),
        _route("a", 0, 9.0, position=1),
    ]
    router = Router(random.Random(5))
    for _ in range(200):
        # routes handed in any order are still tried in (priority, position) order
        assert _ids(router.order(_model("fixed", routes), routes)) == ["a", "b", "late"]


# -- weighted ---------------------------------------------------------------------------


def test_weighted_draws_across_all_routes_and_zero_weight_only_falls_back() -> None:
    routes = [
        _route("zero", 0, 0.0, position=0),
        _route("b", 1, 1.0, position=1),
        _route("c", 2, 3.0, position=2),
    ]
    model = _model("weighted", routes)
    router = Router(random.Random(13))
    n = 4000
    heads: Counter[str] = Counter()
    for _ in range(n):
        order = _ids(router.order(model))
        assert sorted(order) == ["b", "c", "zero"]
        assert order[0] != "zero"
        assert order[1:] == [x for x in ["zero", "b", "c"] if x != order[0]]
        heads[order[0]] += 1
    _assert_share(heads["c"], n, 0.75)


def test_weighted_all_zero_is_declaration_order() -> None:
    routes = [_route("a", 0, 0.0, position=0), _route("b", 1, 0.0, position=1)]
    assert _ids(Router(random.Random(1)).order(_model("weighted", routes))) == ["a", "b"]


# -- least_time -------------------------------------------------------------------------


def test_least_time_converges_on_the_fastest() -> None:
    clock = Clock()
    rng = random.Random(21)
    router = Router(random.Random(22), clock=clock)
    routes = [
        _route("slow", 0, position=0),
        _route("fast", 1, position=1),
        _route("mid", 2, position=2),
        _route("new", 3, position=3),  # never measured: explored now and then
    ]
    means = {"slow": 0.9, "fast": 0.2, "mid": 0.5}
    for _ in range(50):
        for rid, mean in means.items():
            router.latency.observe(rid, rng.gauss(mean, 0.05), clock.now)
        clock.now += 1.0
    model = _model("least_time", routes)
    n = 1000
    first = Counter(router.order(model)[0].id for _ in range(n))
    assert first["fast"] >= 0.9 * n
    order = _ids(router.order(model))
    measured = [x for x in order if x != "new"]
    assert measured == ["fast", "mid", "slow"]


def test_least_time_sorts_again_only_after_the_refresh_interval() -> None:
    clock = Clock()
    router = Router(random.Random(5), clock=clock, exploration=0.0)
    routes = [_route("a", 0, position=0), _route("b", 1, position=1)]
    model = _model("least_time", routes)
    router.latency.observe("a", 0.1, clock.now)
    router.latency.observe("b", 0.5, clock.now)
    assert _ids(router.order(model)) == ["a", "b"]
    for _ in range(30):  # "a" becomes much slower
        router.latency.observe("a", 5.0, clock.now)
    clock.now += LEAST_TIME_REFRESH_S / 2
    assert _ids(router.order(model)) == ["a", "b"]  # the order of a moment ago still holds
    clock.now += LEAST_TIME_REFRESH_S
    assert _ids(router.order(model)) == ["b", "a"]


def test_least_time_explores_unmeasured_routes() -> None:
    clock = Clock()
    router = Router(random.Random(31), clock=clock, exploration=0.05)
    routes = [_route("known", 0, position=0), _route("unknown", 1, position=1)]
    router.latency.observe("known", 0.1, clock.now)
    model = _model("least_time", routes)
    n = 2000
    explored = sum(router.order(model)[0].id == "unknown" for _ in range(n))
    assert explored > 0
    _assert_share(explored, n, 0.05)

    never = Router(random.Random(31), clock=clock, exploration=0.0)
    never.latency.observe("known", 0.1, clock.now)
    assert all(never.order(model)[0].id == "known" for _ in range(500))


def test_least_time_treats_a_stale_route_as_unmeasured() -> None:
    clock = Clock(0.0)
    router = Router(random.Random(1), clock=clock, exploration=0.0)
    router.latency.observe("was_fast", 0.05, 0.0)
    clock.now = 400.0  # past the 300 s staleness bound
    router.latency.observe("slow", 2.0, clock.now)
    routes = [_route("was_fast", 0, position=0), _route("slow", 1, position=1)]
    assert router.latency.average("was_fast", clock.now) is None
    assert _ids(router.order(_model("least_time", routes))) == ["slow", "was_fast"]

    exploring = Router(random.Random(2), clock=clock, exploration=0.5)
    exploring.latency.observe("was_fast", 0.05, 0.0)
    exploring.latency.observe("slow", 2.0, clock.now)
    heads = Counter(exploring.order(_model("least_time", routes))[0].id for _ in range(1000))
    _assert_share(heads["was_fast"], 1000, 0.5)


def test_latency_tracker_average_staleness_and_bound() -> None:
    tracker = LatencyTracker(alpha=0.5, stale_after=10.0, max_routes=2)
    assert tracker.average("a", 0.0) is None
    tracker.observe("a", 1.0, 0.0)
    tracker.observe("a", 2.0, 1.0)
    assert tracker.average("a", 1.0) == pytest.approx(1.5)
    assert tracker.average("a", 12.0) is None  # stale
    tracker.observe("a", 4.0, 12.0)  # a stale average restarts from the new observation
    assert tracker.average("a", 12.0) == pytest.approx(4.0)

    tracker.observe("b", 1.0, 13.0)
    tracker.observe("c", 1.0, 14.0)  # full: the least recently seen ("a") goes
    assert len(tracker) == 2
    assert tracker.average("a", 14.0) is None
    assert tracker.average("c", 14.0) == pytest.approx(1.0)
    tracker.forget({"c"})
    assert len(tracker) == 1
    assert tracker.average("b", 14.0) is None
    with pytest.raises(ValueError, match="alpha"):
        LatencyTracker(alpha=0.0)


# -- cost_first -------------------------------------------------------------------------


def test_cost_first_cheapest_first_unknown_last_in_priority_order() -> None:
    routes = [
        _route("unknown1", 0, position=0),
        _route("dear", 0, position=1),
        _route("cheap", 1, position=2),
        _route("unknown2", 1, position=3),
        _route("cheap_out", 2, position=4),
        _route("no_output_price", 3, position=5),
    ]
    prices: dict[str, tuple[int | None, int | None]] = {
        "dear": (10_000_000, 30_000_000),
        "cheap": (1_000_000, 2_000_000),
        "cheap_out": (2_000_000, 1_000_000),  # cheaper than "cheap" only for output-heavy calls
        "no_output_price": (500_000, None),
    }

    def price_of(route: RouteSnap) -> tuple[int | None, int | None]:
        return prices.get(route.id, (None, None))

    router = Router(random.Random(1))
    model = _model("cost_first", routes)
    in_heavy = router.order(model, expected_tokens=(1000, 10), price_of=price_of)
    assert _ids(in_heavy) == [
        "cheap",
        "cheap_out",
        "dear",
        "unknown1",
        "unknown2",
        "no_output_price",  # the call expects output tokens and this price is unknown
    ]
    out_heavy = router.order(model, expected_tokens=(10, 1000), price_of=price_of)
    assert _ids(out_heavy)[:3] == ["cheap_out", "cheap", "dear"]
    # an embedding-like call (no output tokens) does not need an output price
    embedding = router.order(model, expected_tokens=(1000, 0), price_of=price_of)
    assert _ids(embedding)[0] == "no_output_price"
    # without prices: priority order
    assert _ids(router.order(model)) == _ids(model.routes)


# -- load_balance -----------------------------------------------------------------------


def test_load_balance_fewest_in_flight_first_ties_by_priority() -> None:
    routes = [_route(x, i, position=i) for i, x in enumerate("abc")]
    router = Router(random.Random(1))
    model = _model("load_balance", routes)
    assert _ids(router.order(model)) == ["a", "b", "c"]
    for rid in ["a", "a", "b"]:
        router.in_flight.start(rid)
    assert _ids(router.order(model)) == ["c", "b", "a"]
    router.in_flight.end("a")
    router.in_flight.end("a")
    assert _ids(router.order(model)) == ["a", "c", "b"]
    router.in_flight.end("b")
    assert len(router.in_flight) == 0


def test_in_flight_counts_and_never_goes_negative() -> None:
    counter = InFlight()
    counter.start("r")
    counter.start("r")
    assert counter.count("r") == 2
    counter.end("r")
    assert counter.count("r") == 1
    counter.end("r")
    counter.end("r")
    assert counter.count("r") == 0
    counter.start("r")
    assert counter.count("r") == 1


# -- tag --------------------------------------------------------------------------------


def test_tag_routes_to_the_tagged_route_with_the_default_behind() -> None:
    routes = [
        _route("default", 0, position=0),
        _route("fast", 1, tag="fast", position=1),
        _route("cheap", 1, tag="cheap", position=2),
    ]
    router = Router(random.Random(1))
    model = _model("tag", routes)
    assert _ids(router.order(model, tag="fast")) == ["fast", "default"]
    assert _ids(router.order(model, tag="cheap")) == ["cheap", "default"]
    assert _ids(router.order(model)) == ["default"]
    assert _ids(router.order(model, tag="nope")) == ["default"]


def test_tag_when_the_tagged_route_is_the_first_one() -> None:
    routes = [_route("t", 0, tag="x", position=0), _route("d", 1, position=1)]
    router = Router(random.Random(1))
    model = _model("tag", routes)
    assert _ids(router.order(model, tag="x")) == ["t", "d"]
    assert _ids(router.order(model)) == ["t"]


# -- every strategy ---------------------------------------------------------------------


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_single_route_and_pinned_subset(strategy: str) -> None:
    only = _route("only")
    router = Router(random.Random(1))
    assert router.order(_model(strategy, [only])) == [only]
    assert router.order(_model(strategy, [_route("off", disabled=True)])) == []
    routes = [
        _route("a", 0, position=0),
        _route("b", 0, position=1, provider=OTHER),
        _route("c", 1, position=2, provider=OTHER),
    ]
    model = _model(strategy, routes)
    router.order(model)  # caches the plan of every route
    pinned = [r for r in model.routes if r.provider.slug == "other"]
    for _ in range(50):
        got = _ids(router.order(model, pinned))
        assert set(got) <= {"b", "c"}
        assert got


def test_a_strategy_override_orders_by_its_own_plan_and_leaves_the_models_alone() -> None:
    routes = [
        _route("a", 0, position=0),
        _route("b", 0, position=1, tag="t"),
        _route("c", 1, position=2, provider=OTHER),
    ]
    model = _model("weighted", routes)
    router = Router(random.Random(3))
    assert Counter(router.order(model)[0].id for _ in range(200)).keys() == {"a", "b", "c"}
    for _ in range(50):
        assert _ids(router.order(model, strategy="fixed")) == ["a", "b", "c"]
        assert _ids(router.order(model, strategy="tag", tag="t")) == ["b", "a"]
    # the model's own plan is untouched by the overrides, and naming it is the same plan
    assert Counter(router.order(model)[0].id for _ in range(200)).keys() == {"a", "b", "c"}
    assert Counter(router.order(model, strategy="weighted")[0].id for _ in range(200)).keys() == {
        "a",
        "b",
        "c",
    }
    # a subset (what a policy or a pin leaves) with and without the override
    subset = [r for r in model.routes if r.id != "a"]
    for _ in range(50):
        assert _ids(router.order(model, subset, strategy="fixed")) == ["b", "c"]
    assert Counter(router.order(model, subset)[0].id for _ in range(200)).keys() == {"b", "c"}
    # subset plans are kept: asking again builds none
    plans = len(router._plans)
    router.order(model, list(subset), strategy="fixed")
    router.order(model, list(subset))
    assert len(router._plans) == plans
    # nothing left (a policy allowing only disabled routes) is nothing, whatever is cached
    for override in (None, "fixed", "tag"):
        assert router.order(model, [], strategy=override) == []


_route_lists = st.lists(
    st.tuples(
        st.integers(0, 3),  # priority
        st.sampled_from([0.0, 0.5, 1.0, 3.0]),  # weight
        st.sampled_from([None, "x", "y"]),  # tag
        st.booleans(),  # disabled
        st.sampled_from([None, 0.1, 0.5, 1.0]),  # observed latency
        st.integers(0, 2),  # calls in flight
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    specs=_route_lists,
    strategy=st.sampled_from([*sorted(STRATEGIES), "unknown"]),
    tag=st.sampled_from([None, "x", "y", "z"]),
    seed=st.integers(0, 2**32 - 1),
    explicit=st.booleans(),
    override=st.sampled_from([None, *sorted(STRATEGIES)]),
)
def test_no_strategy_returns_a_disabled_route_or_drops_an_enabled_one(
    specs: list[tuple[int, float, str | None, bool, float | None, int]],
    strategy: str,
    tag: str | None,
    seed: int,
    explicit: bool,
    override: str | None,
) -> None:
    routes = [
        _route(f"r{i}", prio, weight, tag=rtag, disabled=off, position=i)
        for i, (prio, weight, rtag, off, _, _) in enumerate(specs)
    ]
    clock = Clock()
    router = Router(random.Random(seed), clock=clock, exploration=0.3)
    for i, (*_, latency, busy) in enumerate(specs):
        if latency is not None:
            router.latency.observe(f"r{i}", latency, clock.now)
        for _ in range(busy):
            router.in_flight.start(f"r{i}")
    model = _model(strategy, routes)
    enabled = {r.id for r in routes if not r.disabled}

    def price_of(route: RouteSnap) -> tuple[int | None, int | None]:
        n = int(route.id[1:])
        return (None, None) if n % 3 == 0 else (n * 1000, None if n % 3 == 1 else n * 3000)

    for _ in range(3):
        got = _ids(
            router.order(
                model,
                model.routes if explicit else None,
                tag=tag,
                expected_tokens=(100, 20),
                price_of=price_of,
                strategy=override,
            )
        )
        assert len(got) == len(set(got))
        assert set(got) <= enabled
        if (override or strategy) == "tag":
            on = [r.id for r in model.routes if not r.disabled]
            tagged = next((r.id for r in model.routes if r.tag == tag and not r.disabled), None)
            tagged = tagged if tag is not None else None
            default = next((x for x in on if x != tagged), None)
            assert got == [x for x in (tagged, default) if x is not None]
        else:
            assert set(got) == enabled

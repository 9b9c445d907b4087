"""Ordering the routes of one call: the first is tried first, the rest are the fallback chain.

A model's `strategy` names the rule (see `Router.order`); a routing policy may replace it. The
router runs once per call, so whatever depends only on the model (priority groups, cumulative
weights, the tag lookup) is worked out once per `ModelSnap` (and per strategy override, and
per subset of its routes a pin or a policy leaves) and kept in a small plan cache. Whatever
depends on traffic (latency, calls in flight) lives in `LatencyTracker` and `InFlight`, one of
each per process. Randomness comes from an injected `random.Random`, so tests can seed it.
"""

from __future__ import annotations

import random
import time
from bisect import bisect_right
from collections.abc import Callable, Collection, Hashable, Sequence
from itertools import accumulate
from operator import is_
from typing import Final

from llmrelay.snapshot.model import ModelSnap, RouteSnap

__all__ = ["STRATEGIES", "InFlight", "LatencyTracker", "PriceOf", "Router"]

#: A route's (input, output) price in micro-USD per million tokens; None where unknown.
PriceOf = Callable[[RouteSnap], tuple[int | None, int | None]]

#: What one call brings to ordering: (route tag, expected (input, output) tokens, price_of).
_Call = tuple[str | None, tuple[int, int], PriceOf | None]

STRATEGIES: Final = frozenset(
    {"priority", "fixed", "weighted", "least_time", "cost_first", "load_balance", "tag"}
)
#: Plans are per `ModelSnap`; a new snapshot brings new models, so the cache is simply
#: emptied when it reaches this size instead of tracking which generation is still in use.
_MAX_PLANS: Final = 1024


#: How often (seconds) least_time sorts a model's routes by their averages again.
LEAST_TIME_REFRESH_S: Final = 0.1


class _Stat:
    __slots__ = ("avg", "seen")

    def __init__(self, avg: float, seen: float) -> None:
        self.avg = avg
        self.seen = seen


class LatencyTracker:
    """An exponentially weighted average latency per route, from real traffic.

    Each observation moves the average `alpha` of the way towards it, so a route that slows
    down is noticed within a few calls. An average not refreshed for `stale_after` seconds no
    longer counts: the route may have recovered or degraded since, so it is treated as
    unmeasured (and explored again) and its next observation starts a new average. At most
    `max_routes` routes are remembered.
    """

    def __init__(
        self, alpha: float = 0.2, stale_after: float = 300.0, max_routes: int = 4096
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self.stale_after = stale_after
        self.max_routes = max_routes
        self._stats: dict[str, _Stat] = {}

    def __len__(self) -> int:
        return len(self._stats)

    def observe(self, route_id: str, seconds: float, now: float) -> None:
        """One measured call: time to first byte for a stream, the whole call otherwise."""
        stat = self._stats.get(route_id)
        if stat is None:
            if len(self._stats) >= self.max_routes:
                self._make_room(now)
            self._stats[route_id] = _Stat(seconds, now)
        elif now - stat.seen > self.stale_after:
            stat.avg, stat.seen = seconds, now
        else:
            stat.avg += self.alpha * (seconds - stat.avg)
            stat.seen = now

    def average(self, route_id: str, now: float) -> float | None:
        """The average in seconds; None when the route is unmeasured or its average is stale."""
        stat = self._stats.get(route_id)
        if stat is None or now - stat.seen > self.stale_after:
            return None
        return stat.avg

    def forget(self, keep: Collection[str]) -> None:
        """Drops every route not in `keep` (e.g. the route ids of a new snapshot)."""
        for route_id in [r for r in self._stats if r not in keep]:
            del self._stats[route_id]

    def split(
        self, routes: Sequence[RouteSnap], now: float
    ) -> tuple[list[RouteSnap], list[RouteSnap]]:
        """(measured routes, fastest first; unmeasured or stale routes, in the given order)."""
        stats = self._stats
        if not stats:
            return [], list(routes)
        stale_after = self.stale_after
        timed: list[tuple[float, int, RouteSnap]] = []
        untimed: list[RouteSnap] = []
        for i, route in enumerate(routes):
            stat = stats.get(route.id)
            if stat is None or now - stat.seen > stale_after:
                untimed.append(route)
            else:
                timed.append((stat.avg, i, route))
        timed.sort()
        return [t[2] for t in timed], untimed

    def _make_room(self, now: float) -> None:
        stale = [r for r, s in self._stats.items() if now - s.seen > self.stale_after]
        for route_id in stale:
            del self._stats[route_id]
        if len(self._stats) >= self.max_routes:
            oldest = min(self._stats, key=lambda r: self._stats[r].seen)
            del self._stats[oldest]


class InFlight:
    """Calls in flight per route on this process. The executor calls `start` before an
    attempt and `end` after it, whatever happened; routes at zero take no memory."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def __len__(self) -> int:
        """How many routes have at least one call in flight."""
        return len(self._counts)

    def start(self, route_id: str) -> None:
        self._counts[route_id] = self._counts.get(route_id, 0) + 1

    def end(self, route_id: str) -> None:
        n = self._counts.get(route_id, 0)
        if n > 1:
            self._counts[route_id] = n - 1
        else:
            self._counts.pop(route_id, None)

    def count(self, route_id: str) -> int:
        return self._counts.get(route_id, 0)


class _Plan:
    """What ordering needs from one model's candidate routes, worked out once."""

    __slots__ = (
        "by_tag",
        "draw",
        "given",
        "groups",
        "latency_at",
        "latency_order",
        "model",
        "orderer",
        "routes",
    )

    def __init__(self, model: ModelSnap, routes: Sequence[RouteSnap], strategy: str) -> None:
        self.model = model
        #: The routes as the call gave them: held so that their ids (in a cache key) stay theirs.
        self.given = tuple(routes)
        self.routes = tuple(
            sorted((r for r in routes if not r.disabled), key=lambda r: (r.priority, r.position))
        )
        self.orderer = _ORDERERS.get(strategy, Router._priority)
        #: The weighted draw over every route (strategy `weighted`); None if all weigh 0.
        self.draw = _weights(self.routes)
        #: (start, draw) for each priority group with two routes or more and some weight.
        self.groups: list[tuple[int, tuple[tuple[float, ...], int]]] = []
        start = 0
        for end in range(1, len(self.routes) + 1):
            if end == len(self.routes) or self.routes[end].priority != self.routes[start].priority:
                draw = _weights(self.routes[start:end]) if end - start > 1 else None
                if draw is not None:
                    self.groups.append((start, draw))
                start = end
        self.by_tag: dict[str, RouteSnap] = {}
        for route in self.routes:
            if route.tag is not None:
                self.by_tag.setdefault(route.tag, route)
        #: least_time: (measured fastest first, unmeasured) as of `latency_at`
        self.latency_order: tuple[tuple[RouteSnap, ...], tuple[RouteSnap, ...]] | None = None
        self.latency_at = 0.0


def _weights(routes: Sequence[RouteSnap]) -> tuple[tuple[float, ...], int] | None:
    """(cumulative weights, index of the last route with weight) or None if none has any.
    Negative or NaN weights count as 0."""
    cum = tuple(accumulate(r.weight if r.weight > 0.0 else 0.0 for r in routes))
    if not cum or cum[-1] <= 0.0:
        return None
    last = max(i for i, r in enumerate(routes) if r.weight > 0.0)
    return cum, last


def _pick(rng: random.Random, draw: tuple[tuple[float, ...], int]) -> int:
    cum, last = draw
    i = bisect_right(cum, rng.random() * cum[-1])
    return i if i <= last else last  # the product can round up to the total


def _same(a: Sequence[RouteSnap], b: Sequence[RouteSnap]) -> bool:
    return len(a) == len(b) and all(map(is_, a, b))


class Router:
    """Orders a call's candidate routes by its model's strategy. One per process: it holds
    the latency and in-flight statistics the executor feeds."""

    def __init__(
        self,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        exploration: float = 0.05,
    ) -> None:
        self.latency = LatencyTracker()
        self.in_flight = InFlight()
        #: Share of `least_time` calls that put one unmeasured or stale route first, so that
        #: no route is starved of the measurements that would promote it.
        self.exploration = exploration
        self._rng = rng or random.Random()
        self._clock = clock
        #: id(model) -> its plan; (id(model), strategy) for an overridden strategy;
        #: (id(model), strategy, route ids) for a subset of the routes. A plan holds its model
        #: and the routes it was given, so the ids in its key cannot be reused meanwhile.
        self._plans: dict[Hashable, _Plan] = {}

    def order(
        self,
        model: ModelSnap,
        routes: Sequence[RouteSnap] | None = None,
        *,
        tag: str | None = None,
        expected_tokens: tuple[int, int] = (0, 0),
        price_of: PriceOf | None = None,
        strategy: str | None = None,
    ) -> list[RouteSnap]:
        """The routes to try, first first. `routes` are the call's candidates in (priority,
        position) order (e.g. pinned to one provider, or those a routing policy allows);
        None means every route of the model. Disabled routes are never returned. `tag` is
        the request's route tag header; `expected_tokens` (input, output) and `price_of`
        serve `cost_first`; `strategy` (a routing policy's) replaces `model.strategy`.

        - priority (default, and for unknown names): groups by priority, lowest first; each
          group's head is drawn by weight, the rest of the group follow in declaration order.
        - fixed: (priority, position) order.
        - weighted: the head is drawn by weight across every route (weight 0 is never drawn);
          the rest follow in (priority, position) order, as does everything if all weigh 0.
        - least_time: fastest average first, unmeasured or stale routes last in priority
          order; an `exploration` share of calls puts a random one of those first.
        - cost_first: cheapest for the expected tokens first; unknown prices last.
        - load_balance: fewest calls in flight on this process first.
        - tag: the first route tagged `tag`, then the default route (the first that is not
          it); without a tag, or with an unknown one, the default route alone.
        """
        if routes is None or routes is model.enabled_routes:
            routes = model.routes  # the whole set: the plan leaves the disabled ones out
        if len(routes) < 2:
            return [] if not routes or routes[0].disabled else [routes[0]]
        if strategy is None or strategy == model.strategy:
            strategy = model.strategy
            key: Hashable = id(model)
        else:
            key = (id(model), strategy)
        plan = self._plans.get(key)
        if plan is None or plan.model is not model:
            plan = self._keep(key, _Plan(model, model.routes, strategy))
        if routes is not model.routes and not _same(plan.routes, routes):
            # A subset (a pinned provider, a routing policy's allowed routes).
            subset = (id(model), strategy, tuple(map(id, routes)))
            plan = self._plans.get(subset)
            if plan is None:
                plan = self._keep(subset, _Plan(model, routes, strategy))
        if len(plan.routes) < 2:
            return list(plan.routes)
        return plan.orderer(self, plan, (tag, expected_tokens, price_of))

    def _keep(self, key: Hashable, plan: _Plan) -> _Plan:
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _priority(self, plan: _Plan, call: _Call) -> list[RouteSnap]:
        result = list(plan.routes)
        for start, draw in plan.groups:
            i = start + _pick(self._rng, draw)
            if i != start:
                result.insert(start, result.pop(i))
        return result

    def _fixed(self, plan: _Plan, call: _Call) -> list[RouteSnap]:
        return list(plan.routes)

    def _weighted(self, plan: _Plan, call: _Call) -> list[RouteSnap]:
        result = list(plan.routes)
        if plan.draw is not None:
            i = _pick(self._rng, plan.draw)
            if i:
                result.insert(0, result.pop(i))
        return result

    def _least_time(self, plan: _Plan, call: _Call) -> list[RouteSnap]:
        # Sorting by latency is most of this strategy's cost, and the averages move slowly:
        # the order is worked out again at most every LEAST_TIME_REFRESH_S per plan.
        now = self._clock()
        cached = plan.latency_order
        if cached is None or now - plan.latency_at >= LEAST_TIME_REFRESH_S or now < plan.latency_at:
            measured_now, unmeasured_now = self.latency.split(plan.routes, now)
            cached = plan.latency_order = (tuple(measured_now), tuple(unmeasured_now))
            plan.latency_at = now
        measured, unmeasured = cached
        if unmeasured and self._rng.random() < self.exploration:
            explored = self._rng.randrange(len(unmeasured))
            rest = [r for i, r in enumerate(unmeasured) if i != explored]
            return [unmeasured[explored], *measured, *rest]
        return [*measured, *unmeasured]

    def _cost_first(self, plan: _Plan, call: _Call) -> list[RouteSnap]:
        """A price missing for a kind of token the call expects none of does not make the
        cost unknown (an embedding route has no output price); both missing does."""
        _, (tin, tout), price_of = call
        if price_of is None:
            return list(plan.routes)
        known: list[tuple[int, int, RouteSnap]] = []
        unknown: list[RouteSnap] = []
        for i, route in enumerate(plan.routes):
            pin, pout = price_of(route)
            if (pin is None and (pout is None or tin)) or (pout is None and tout):
                unknown.append(route)
            else:
                known.append((tin * (pin or 0) + tout * (pout or 0), i, route))
        known.sort()
        result = [k[2] for k in known]
        result.extend(unknown)
        return result

    def _load_balance(self, plan: _Plan, call: _Call) -> list[RouteSnap]:
        if not self.in_flight:
            return list(plan.routes)
        return sorted(plan.routes, key=lambda r: self.in_flight.count(r.id))  # stable: ties

    def _tag(self, plan: _Plan, call: _Call) -> list[RouteSnap]:
        routes = plan.routes
        tag = call[0]
        tagged = plan.by_tag.get(tag) if tag is not None else None
        if tagged is None:
            return [routes[0]]
        return [tagged, routes[1] if routes[0] is tagged else routes[0]]


_Orderer = Callable[[Router, _Plan, _Call], list[RouteSnap]]
_ORDERERS: Final[dict[str, _Orderer]] = {
    "priority": Router._priority,
    "fixed": Router._fixed,
    "weighted": Router._weighted,
    "least_time": Router._least_time,
    "cost_first": Router._cost_first,
    "load_balance": Router._load_balance,
    "tag": Router._tag,
}

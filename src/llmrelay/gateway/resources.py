"""Which account (provider resource) each attempt uses, and the accounts' quota buckets.

A route whose provider has resources carries one variant per resource (snapshot/
resources.py). For such a route the executor is handed its variants instead of the route,
so that failover moves to the next resource of the same provider before the next route:

- by resource priority (lower first);
- among resources of one priority, by the route's strategy: `fixed` keeps their declared
  order; `priority` and `weighted` draw the first one by `weight`; every other strategy
  (least_time, cost_first, load_balance, tag: measures that tell routes apart, not accounts
  of one provider) takes them in turn (round robin);
- a conversation bound to one resource (routing/affinity.py; openai_codex accounts) goes
  to it first; it moves
  on only when that resource is unavailable (its breaker open, its account resting,
  its bucket spent, or it fails), as any other failover;
- a resource whose quota bucket (rpm, tpm) is spent for the current minute is skipped
  without a call. When that leaves nothing to try at all, the client gets 503
  `resources_exhausted` with `Retry-After` (the seconds to the next minute). The buckets
  are counted in each process, and each of N replicas (the shared limiter's heartbeat
  count, or `serve --workers N`) takes its floor share of a quota (at least 1 a minute),
  so the replicas together never spend more than the quota (as a limit is divided when it
  cannot be shared: limits/base.py `Scope.shared`).

Health is not kept here: each variant is judged by the breaker keyed by its resource
(`ResourceSnap.breaker_key`), shared by every route to that provider, with the half-open
rule of routing/breaker.py. Disabled resources never reach the snapshot, so nothing can
readmit them.

Buckets are per process (a fixed window per minute): with N replicas, each may spend the
whole quota (docs/configuration.md says so). Nothing here runs for a model whose providers
have no resources: the executor does not call it (`ModelSnap.resourced`).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import NoCandidate
from llmrelay.limits.base import floor_share
from llmrelay.snapshot.model import ResourceSnap, RouteSnap

_WINDOW_S: Final = 60.0
#: Strategies that keep the declared order, and those that draw by weight.
_DECLARED: Final = frozenset({"fixed"})
_WEIGHTED: Final = frozenset({"priority", "weighted"})


class _Bucket:
    """One resource's spend in the current minute."""

    __slots__ = ("requests", "tokens", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.requests = 0
        self.tokens = 0


class ResourcePicker:
    """One per process, on the executor: the buckets and the round-robin turns."""

    def __init__(
        self, *, rng: random.Random | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._rng = rng or random.Random()
        self._clock = clock
        #: How many processes share each quota (stack.py sets it from the limiter).
        self.share: Callable[[], int] = _alone
        self._buckets: dict[str, _Bucket] = {}
        self._turns: dict[str, int] = {}

    def targets(
        self,
        routes: Sequence[RouteSnap],
        strategy: str,
        record: CallRecord,
        bound: str | None = None,
    ) -> Iterator[RouteSnap]:
        """What the executor tries, in order: each route as it is, or its resources'
        variants (the `bound` resource's first); `record.resource_id` names the resource
        of the target just given."""
        tried = False
        spent: list[ResourceSnap] = []
        for route in routes:
            variants = route.variants
            if not variants:
                record.resource_id = None
                tried = True
                yield route
                continue
            ordered = self._order(route.id, variants, strategy)
            if bound is not None:
                ordered = _bound_first(ordered, bound)
            for variant in ordered:
                resource = variant.resource
                assert resource is not None  # a variant always has one
                if not self._take(resource):
                    spent.append(resource)
                    continue
                record.resource_id = resource.id
                tried = True
                yield variant
        if spent and not tried:
            wait = max(1, math.ceil(_WINDOW_S - self._clock() % _WINDOW_S))
            names = ", ".join(sorted({r.name for r in spent}))
            raise NoCandidate(
                f"every resource of this model's providers has spent its quota ({names})",
                code="resources_exhausted",
                headers={"Retry-After": str(wait)},
            )

    def spend_tokens(self, resource_id: str, tokens: int) -> None:
        """Charge a finished request's tokens to the resource that served it (tpm)."""
        bucket = self._bucket(resource_id)
        bucket.tokens += tokens

    def usage(self, resource_id: str) -> tuple[int, int]:
        """Requests and tokens spent in the current minute (for tests and the console)."""
        bucket = self._bucket(resource_id)
        return bucket.requests, bucket.tokens

    def _take(self, resource: ResourceSnap) -> bool:
        """Whether the resource's buckets have room; takes one request if so."""
        rpm, tpm = resource.rpm, resource.tpm
        if rpm is None and tpm is None:
            return True
        share = self.share()
        bucket = self._bucket(resource.id)
        if rpm is not None and bucket.requests >= floor_share(rpm, share):
            return False
        if tpm is not None and bucket.tokens >= floor_share(tpm, share):
            return False
        bucket.requests += 1
        return True

    def _bucket(self, resource_id: str) -> _Bucket:
        window = int(self._clock() // _WINDOW_S)
        bucket = self._buckets.get(resource_id)
        if bucket is None or bucket.window != window:
            bucket = self._buckets[resource_id] = _Bucket(window)
        return bucket

    def _order(
        self, route_id: str, variants: tuple[RouteSnap, ...], strategy: str
    ) -> list[RouteSnap]:
        """The variants by resource priority, each priority's group by the strategy."""
        if len(variants) == 1 or strategy in _DECLARED:
            return list(variants)
        ordered: list[RouteSnap] = []
        start = 0
        while start < len(variants):
            priority = _resource(variants[start]).priority
            end = start
            while end < len(variants) and _resource(variants[end]).priority == priority:
                end += 1
            group = list(variants[start:end])
            if len(group) > 1:
                if strategy in _WEIGHTED:
                    first = self._draw(group)
                    group.insert(0, group.pop(first))
                else:
                    key = f"{route_id}:{priority}"
                    turn = self._turns.get(key, 0)
                    self._turns[key] = turn + 1
                    shift = turn % len(group)
                    group = group[shift:] + group[:shift]
            ordered.extend(group)
            start = end
        return ordered

    def _draw(self, group: list[RouteSnap]) -> int:
        weights = [_resource(v).weight for v in group]
        total = sum(weights)
        if total <= 0:
            return 0
        point = self._rng.uniform(0.0, total)
        for index, weight in enumerate(weights):
            point -= weight
            if point <= 0:
                return index
        return len(group) - 1

    def forget(self, keep: set[str]) -> None:
        """Drop the buckets of resources no longer configured (after a reload)."""
        for resource_id in [r for r in self._buckets if r not in keep]:
            del self._buckets[resource_id]


def _alone() -> int:
    return 1


def _bound_first(ordered: list[RouteSnap], bound: str) -> list[RouteSnap]:
    for index, variant in enumerate(ordered):
        if index and _resource(variant).id == bound:
            return [variant, *ordered[:index], *ordered[index + 1 :]]
    return ordered


def _resource(variant: RouteSnap) -> ResourceSnap:
    resource = variant.resource
    assert resource is not None
    return resource

"""The in-process limiter: exact for one process (the default, with no Redis), and each
replica's fallback while Redis is unreachable (with its share of every limit).

It runs on every request of a limited key, so it is written for the request path: running
tpm sums instead of summing buckets, the month's bounds cached, and only the tightest
limit's Quota built (bench.limits holds it to 95 % of the throughput without limits)."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping

from llmrelay.limits.base import (
    TPM_BUCKETS,
    WINDOW_S,
    Admission,
    Demand,
    LimitExceeded,
    LimitKind,
    Months,
    Quota,
    Scope,
    ScopeKind,
)

_FAR = float(WINDOW_S)


class _State:
    """One scope's counters."""

    __slots__ = ("admitted", "buckets", "leases", "tpm_used")

    def __init__(self) -> None:
        self.admitted: deque[float] = deque()  # rpm: admission times, oldest first
        #: tpm: second -> tokens, oldest first (insertion order; a second that a stepped-back
        #: clock adds late leaves late: counted longer, never shorter)
        self.buckets: dict[int, int] = {}
        self.tpm_used = 0  # the sum of `buckets`
        self.leases: set[str] = set()  # concurrency: lease ids

    def expire(self, now: float) -> None:
        admitted = self.admitted
        cutoff = now - WINDOW_S
        while admitted and admitted[0] <= cutoff:
            admitted.popleft()
        buckets = self.buckets
        if buckets:
            oldest = int(now) - TPM_BUCKETS + 1
            while buckets:
                second = next(iter(buckets))
                if second >= oldest:
                    break
                self.tpm_used -= buckets.pop(second)

    def rpm_reset(self, now: float) -> float:
        return self.admitted[0] + WINDOW_S - now if self.admitted else _FAR

    def tpm_reset(self, now: float) -> float:
        buckets = self.buckets
        return min(buckets) + TPM_BUCKETS - now if buckets else _FAR


class LocalLimiter:
    """`share` divides every limit (see Scope.shared): N worker processes without Redis
    each enforce 1/N, so together they never exceed a limit."""

    def __init__(self, share: int = 1) -> None:
        self.share = share
        self._states: dict[str, _State] = {}
        self._spend: dict[str, int] = {}  # scope name -> micro-USD spent in `_month`
        self._month = ""
        self._months = Months()

    async def admit(self, demand: Demand) -> Admission:
        return self.admit_now(demand)

    def admit_now(self, demand: Demand) -> Admission:
        now = demand.now
        months = self._months
        if not months.start <= now < months.end:
            self._turn_month(now)
        states = self._states
        share = self.share
        scopes = demand.scopes if share <= 1 else tuple(s.shared(share) for s in demand.scopes)
        checked: list[_State] = []
        for scope in scopes:
            state = states.get(scope.name)
            if state is None:
                state = states[scope.name] = _State()
            state.expire(now)
            self._check(scope, state, demand)
            checked.append(state)
        admission = Admission(demand, self, bucket=int(now))
        # The tightest limit: the smallest share left (remaining / limit), the first on ties.
        best_left, best_limit = 1, 0  # "nothing yet": any limit is tighter
        best: tuple[LimitKind, ScopeKind, _State] | None = None
        spend = self._spend
        for index, scope in enumerate(scopes):
            state = checked[index]
            limit = scope.rpm
            if limit is not None:
                admitted = state.admitted
                if admitted and now < admitted[-1]:  # the clock stepped back: keep the order
                    bisect.insort(admitted, now)
                else:
                    admitted.append(now)
                left = limit - len(admitted)
                if best is None or left * best_limit < best_left * limit:
                    best_left, best_limit, best = left, limit, (LimitKind.RPM, scope.kind, state)
            limit = scope.tpm
            if limit is not None:
                reserve = demand.tokens if demand.tokens < limit else limit
                buckets = state.buckets
                second = admission.bucket
                buckets[second] = buckets.get(second, 0) + reserve
                state.tpm_used += reserve
                admission.reserved[scope.name] = reserve
                left = limit - state.tpm_used
                if best is None or left * best_limit < best_left * limit:
                    best_left, best_limit, best = left, limit, (LimitKind.TPM, scope.kind, state)
            limit = scope.concurrency
            if limit is not None:
                leases = state.leases
                leases.add(demand.lease_id)
                left = limit - len(leases)
                if best is None or left * best_limit < best_left * limit:
                    kind = LimitKind.CONCURRENCY
                    best_left, best_limit, best = left, limit, (kind, scope.kind, state)
            limit = scope.budget_micros
            if limit is not None:
                left = limit - spend.get(scope.name, 0)
                if best is None or left * best_limit < best_left * limit:
                    best_left, best_limit, best = left, limit, (LimitKind.BUDGET, scope.kind, state)
        if best is not None:
            kind, holder, state = best
            reset = self._reset(kind, state, now)
            admission.quota = Quota(kind, holder, best_limit, best_left, reset)
        return admission

    def _reset(self, kind: LimitKind, state: _State, now: float) -> float:
        if kind is LimitKind.RPM:
            return state.rpm_reset(now)
        if kind is LimitKind.TPM:
            return state.tpm_reset(now)
        if kind is LimitKind.CONCURRENCY:
            return 1.0
        return self._months.end - now if now >= self._months.start else _FAR

    def _check(self, scope: Scope, state: _State, demand: Demand) -> None:
        """Raise for the first limit of `scope` that refuses."""
        now = demand.now
        if scope.rpm is not None and len(state.admitted) >= scope.rpm:
            reset = state.rpm_reset(now)
            raise LimitExceeded(Quota(LimitKind.RPM, scope.kind, scope.rpm, 0, reset), reset)
        if scope.tpm is not None:
            used = state.tpm_used
            if used + min(demand.tokens, scope.tpm) > scope.tpm:
                reset = state.tpm_reset(now)
                quota = Quota(LimitKind.TPM, scope.kind, scope.tpm, scope.tpm - used, reset)
                raise LimitExceeded(quota, reset)
        if scope.concurrency is not None and len(state.leases) >= scope.concurrency:
            quota = Quota(LimitKind.CONCURRENCY, scope.kind, scope.concurrency, 0, 1.0)
            raise LimitExceeded(quota, 1.0)
        if scope.budget_micros is not None:
            spent = self._spend.get(scope.name, 0)
            if spent >= scope.budget_micros:
                reset = self._reset(LimitKind.BUDGET, state, now)
                left = scope.budget_micros - spent
                raise LimitExceeded(
                    Quota(LimitKind.BUDGET, scope.kind, scope.budget_micros, left, reset), reset
                )

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        if admission.settled:
            return
        admission.settled = True
        demand = admission.demand
        # A request admitted last month and settled in this one: Redis charges the month it
        # was admitted in, which here is already gone.
        this_month = self._months.of(demand.now) == self._turn_month(demand.now)
        states = self._states
        for scope in demand.scopes:
            name = scope.name
            state = states.get(name)
            if state is None:
                continue
            if state.leases:
                state.leases.discard(demand.lease_id)
            reserved = admission.reserved.get(name)
            if reserved is not None and tokens is not None:
                second = admission.bucket
                buckets = state.buckets
                if second in buckets:  # else it has left the window already
                    buckets[second] += tokens - reserved
                    state.tpm_used += tokens - reserved
            if cost_micros and scope.budget_micros is not None and this_month:
                self._spend[name] = self._spend.get(name, 0) + cost_micros

    def add_spend(self, name: str, cost_micros: int, now: float) -> None:
        """Spend taken elsewhere (a request admitted by Redis, settled while Redis was
        down): counted here too, so the fallback does not overspend."""
        if self._months.of(now) == self._turn_month(now):
            self._spend[name] = self._spend.get(name, 0) + cost_micros

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None:
        if month < self._month:
            return
        if month > self._month:
            self._month = month
            self._spend = {}
        for name, micros in spend.items():
            self._spend.setdefault(name, micros)

    def spent(self, name: str) -> int:
        return self._spend.get(name, 0)

    def in_flight(self, name: str) -> int:
        state = self._states.get(name)
        return 0 if state is None else len(state.leases)

    def _turn_month(self, now: float) -> str:
        """The month spend is counted in; only forward ("YYYY-MM" sorts by time): a late
        settle must not turn it back."""
        month = self._months.of(now)
        if month > self._month:
            self._month = month
            self._spend = {}
        return self._month

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

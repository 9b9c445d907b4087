"""The in-process limiter: exact for one process (the default, with no Redis), and each
replica's fallback while Redis is unreachable (with its share of every limit)."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from llmrelay.limits.base import (
    TPM_BUCKETS,
    WINDOW_S,
    Admission,
    Demand,
    LimitExceeded,
    LimitKind,
    Quota,
    Scope,
    month_of,
    seconds_to_next_month,
    tightest,
)


@dataclass(slots=True)
class _State:
    """One scope's counters."""

    admitted: deque[float] = field(default_factory=deque)  # rpm: admission times
    buckets: dict[int, int] = field(default_factory=dict)  # tpm: second -> tokens
    leases: set[str] = field(default_factory=set)  # concurrency: lease ids

    def expire(self, now: float) -> None:
        admitted = self.admitted
        while admitted and admitted[0] <= now - WINDOW_S:
            admitted.popleft()
        oldest = int(now) - TPM_BUCKETS + 1
        buckets = self.buckets
        for second in [s for s in buckets if s < oldest] if buckets else ():
            del buckets[second]


class LocalLimiter:
    """`share` divides every limit (see Scope.shared): N worker processes without Redis
    each enforce 1/N, so together they never exceed a limit."""

    def __init__(self, share: int = 1) -> None:
        self.share = share
        self._states: dict[str, _State] = {}
        self._spend: dict[str, int] = {}  # scope name -> micro-USD spent in `_month`
        self._month = ""

    def _scope(self, scope: Scope) -> Scope:
        return scope.shared(self.share)

    async def admit(self, demand: Demand) -> Admission:
        return self.admit_now(demand)

    def admit_now(self, demand: Demand) -> Admission:
        now = demand.now
        self._turn_month(now)
        states = self._states
        scopes = [self._scope(s) for s in demand.scopes]
        for scope in scopes:
            state = states.get(scope.name)
            if state is None:
                state = states[scope.name] = _State()
            state.expire(now)
            self._check(scope, state, demand)
        admission = Admission(demand, self, bucket=int(now))
        quotas: list[Quota] = []
        for scope in scopes:
            state = states[scope.name]
            if scope.rpm is not None:
                admitted = state.admitted
                if admitted and now < admitted[-1]:  # the clock stepped back: keep the order
                    bisect.insort(admitted, now)
                else:
                    admitted.append(now)
                quotas.append(_rpm_quota(scope, state, now))
            if scope.tpm is not None:
                reserve = min(demand.tokens, scope.tpm)
                second = int(now)
                state.buckets[second] = state.buckets.get(second, 0) + reserve
                admission.reserved[scope.name] = reserve
                quotas.append(_tpm_quota(scope, state, now))
            if scope.concurrency is not None:
                state.leases.add(demand.lease_id)
                quotas.append(
                    Quota(
                        LimitKind.CONCURRENCY,
                        scope.kind,
                        scope.concurrency,
                        scope.concurrency - len(state.leases),
                        1.0,
                    )
                )
            if scope.budget_micros is not None:
                spent = self._spend.get(scope.name, 0)
                reset = seconds_to_next_month(now)
                left = scope.budget_micros - spent
                quotas.append(Quota(LimitKind.BUDGET, scope.kind, scope.budget_micros, left, reset))
        admission.quota = tightest(quotas)
        return admission

    def _check(self, scope: Scope, state: _State, demand: Demand) -> None:
        """Raise for the first limit of `scope` that refuses."""
        now = demand.now
        if scope.rpm is not None and len(state.admitted) >= scope.rpm:
            quota = _rpm_quota(scope, state, now)
            raise LimitExceeded(quota, quota.reset_s)
        if scope.tpm is not None:
            used = sum(state.buckets.values())
            if used + min(demand.tokens, scope.tpm) > scope.tpm:
                quota = _tpm_quota(scope, state, now)
                raise LimitExceeded(quota, quota.reset_s)
        if scope.concurrency is not None and len(state.leases) >= scope.concurrency:
            quota = Quota(LimitKind.CONCURRENCY, scope.kind, scope.concurrency, 0, 1.0)
            raise LimitExceeded(quota, 1.0)
        if scope.budget_micros is not None:
            spent = self._spend.get(scope.name, 0)
            if spent >= scope.budget_micros:
                reset = seconds_to_next_month(now)
                left = scope.budget_micros - spent
                raise LimitExceeded(
                    Quota(LimitKind.BUDGET, scope.kind, scope.budget_micros, left, reset), reset
                )

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        if admission.settled:
            return
        admission.settled = True
        demand = admission.demand
        self._turn_month(demand.now)
        # A request admitted last month and settled in this one: Redis charges the month it
        # was admitted in, which here is already gone.
        this_month = month_of(demand.now) == self._month
        for scope in demand.scopes:
            state = self._states.get(scope.name)
            if state is None:
                continue
            state.leases.discard(demand.lease_id)
            reserved = admission.reserved.get(scope.name)
            if reserved is not None and tokens is not None:
                second = admission.bucket
                if second in state.buckets:  # else it has left the window already
                    state.buckets[second] += tokens - reserved
            if cost_micros and scope.budget_micros is not None and this_month:
                self._spend[scope.name] = self._spend.get(scope.name, 0) + cost_micros

    def add_spend(self, name: str, cost_micros: int, now: float) -> None:
        """Spend taken elsewhere (a request admitted by Redis, settled while Redis was
        down): counted here too, so the fallback does not overspend."""
        self._turn_month(now)
        if month_of(now) == self._month:
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

    def _turn_month(self, now: float) -> None:
        """Only forward ("YYYY-MM" sorts by time): a late settle must not turn it back."""
        month = month_of(now)
        if month > self._month:
            self._month = month
            self._spend = {}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def _rpm_quota(scope: Scope, state: _State, now: float) -> Quota:
    assert scope.rpm is not None
    admitted = state.admitted
    reset = admitted[0] + WINDOW_S - now if admitted else float(WINDOW_S)
    return Quota(LimitKind.RPM, scope.kind, scope.rpm, scope.rpm - len(admitted), reset)


def _tpm_quota(scope: Scope, state: _State, now: float) -> Quota:
    assert scope.tpm is not None
    buckets = state.buckets
    reset = min(buckets) + TPM_BUCKETS - now if buckets else float(WINDOW_S)
    return Quota(LimitKind.TPM, scope.kind, scope.tpm, scope.tpm - sum(buckets.values()), reset)

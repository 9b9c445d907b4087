"""The in-process limiter: exact for one process (the default, with no Redis), and each
replica's fallback while Redis is unreachable (with its share of every limit).

It runs on every request of a limited key, so it is written for the request path (bench.limits
holds it to 95 % of the throughput without limits): each key's plan is compiled once into
slots that hold the scope's counters and limits (no lookup by name, no dispatch on limits a
scope lacks); tpm is a running sum; the month is looked at only with a budget; a lease id is
made only with a concurrency limit; the tightest limit is kept as figures, not a Quota."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping
from typing import Final

from llmrelay.limits.base import (
    TPM_BUCKETS,
    WINDOW_S,
    Admission,
    Demand,
    LimitKind,
    Months,
    Plan,
    Program,
    Quota,
    Scope,
)
from llmrelay.limits.errors import LimitExceeded

_FAR: Final = float(WINDOW_S)
_RPM: Final = 0  # kind indexes (base.KINDS)
_TPM: Final = 1
_CONCURRENCY: Final = 2
_BUDGET: Final = 3


class _State:
    """One scope's counters."""

    __slots__ = (
        *("admitted", "buckets", "counted", "first", "leases", "open_second", "open_tokens"),
        *("held", "spent", "tpm_used"),
    )

    def __init__(self) -> None:
        self.admitted: deque[float] = deque()  # rpm: admission times, oldest first
        #: tpm: the seconds before the open one -> tokens, oldest first (insertion order; a
        #: second that a stepped-back clock adds late leaves late: counted longer, never
        #: shorter).
        self.buckets: dict[int, int] = {}
        #: tpm: the latest second taken from and its tokens (-1: none; times are after the
        #: epoch), kept out of `buckets` as machine integers: the admissions and settles of a
        #: busy key mostly fall in the second of the one before, and then touch no dict.
        #: It is later than every second in `buckets`.
        self.open_second = -1
        self.open_tokens = 0
        self.first = 0  # the oldest second counted (when any): what expires next
        self.tpm_used = 0  # the sum of `buckets` and `open_tokens`
        self.leases: set[str | int | None] = set()  # concurrency: lease ids (never None)
        self.spent = 0  # budget: micro-USD spent in the limiter's month
        self.held = 0  # budget: micro-USD held by the requests in flight
        self.counted = False  # whether `spent` is known for that month (seeded or added)

    def rpm_reset(self, now: float) -> float:
        return self.admitted[0] + WINDOW_S - now if self.admitted else _FAR

    def tpm_reset(self, now: float) -> float:
        """When the first second still counted leaves the window (`first`, kept by the
        expiry, not a walk of the buckets)."""
        counting = self.buckets or self.open_second >= 0
        return self.first + TPM_BUCKETS - now if counting else _FAR

    def take_tpm(self, second: int, tokens: int) -> None:
        opened = self.open_second
        if second == opened:
            self.open_tokens += tokens
        elif second > opened:  # a new second: the open one joins the closed ones
            if opened >= 0:
                self.buckets[opened] = self.open_tokens
            elif not self.buckets:
                self.first = second
            self.open_second, self.open_tokens = second, tokens
        else:  # the clock stepped back
            buckets = self.buckets
            if second in buckets:
                buckets[second] += tokens
            else:
                if not buckets:
                    self.first = second
                buckets[second] = tokens
        self.tpm_used += tokens

    def expire_tpm(self, oldest: int) -> None:
        """Drop the seconds below `oldest` (the first inserted first; see `buckets`)."""
        buckets = self.buckets
        while buckets:
            second = next(iter(buckets))
            if second >= oldest:
                self.first = second
                return
            self.tpm_used -= buckets.pop(second)
        opened = self.open_second
        if opened >= oldest:
            self.first = opened
        elif opened >= 0:
            self.tpm_used -= self.open_tokens
            self.open_second, self.open_tokens = -1, 0


_NONE: Final = -1  # a slot's limit it does not have


class _Slot:
    """One scope of a program: its counters and its (shared) limits, as machine integers
    (_NONE where it has none: an `int | None` is a boxed object in compiled code)."""

    __slots__ = (
        *("admitted", "at", "budget", "buckets", "concurrency", "leases", "name", "rpm"),
        *("scope", "state", "tpm"),
    )

    def __init__(self, at: int, scope: Scope, state: _State) -> None:
        self.at = at  # index * 4: this scope's limits in Admission.top
        self.scope, self.name, self.state = scope, scope.name, state
        # The state's containers (never replaced), one attribute read closer.
        self.admitted, self.buckets, self.leases = state.admitted, state.buckets, state.leases
        self.rpm: int = _NONE if scope.rpm is None else scope.rpm
        self.tpm: int = _NONE if scope.tpm is None else scope.tpm
        self.concurrency: int = _NONE if scope.concurrency is None else scope.concurrency
        self.budget: int = _NONE if scope.budget_micros is None else scope.budget_micros


class LocalProgram(Program):
    """A plan's scopes as slots over this limiter's counters (see Plan)."""

    __slots__ = ("budget", "key", "leased", "slots", "tpm")

    def __init__(self, owner: LocalLimiter, scopes: tuple[Scope, ...]) -> None:
        super().__init__(owner, scopes, owner.degraded)
        self.key = owner.key
        self.slots = tuple(_Slot(4 * i, s, owner.state(s.name)) for i, s in enumerate(scopes))
        #: What a settle touches: leases to free, tpm to reconcile, spend to add.
        self.leased = tuple(x.state.leases for x in self.slots if x.concurrency >= 0)
        self.tpm = tuple((x.state, x.tpm) for x in self.slots if x.tpm >= 0)
        self.budget = tuple(x.state for x in self.slots if x.budget >= 0)


def _expire_rpm(admitted: deque[float], cutoff: float) -> None:
    while admitted and admitted[0] <= cutoff:
        admitted.popleft()


class LocalLimiter:
    """`share` divides every limit (see Scope.shared): N worker processes without Redis
    each enforce 1/N, so together they never exceed a limit."""

    def __init__(self, share: int = 1, *, degraded: bool = False) -> None:
        self._share = share
        #: Whose programs are current: renewed when the share changes (one identity check
        #: per admission covers both "compiled by this limiter" and "for this share").
        self.key = object()
        #: Whether this is a replica's fallback while Redis is unreachable (its answers say so).
        self.degraded = degraded
        #: Scope name -> its counters, its month's spend among them (`_month`).
        self.states: dict[str, _State] = {}
        self._month = ""
        self._months = Months()
        self._lease_seq = 0  # the last lease id made (an int: no object per admission)

    @property
    def share(self) -> int:
        return self._share

    @share.setter
    def share(self, share: int) -> None:
        if share != self._share:
            self._share, self.key = share, object()

    def state(self, name: str) -> _State:
        states = self.states
        found = states.get(name)
        if found is None:
            found = states[name] = _State()
        return found

    async def admit(self, demand: Demand) -> Admission:
        return self.admit_now(demand)

    def admit_now(self, demand: Demand) -> Admission:
        return self.take(Plan(demand.scopes), demand.tokens, demand.now, demand.lease_id)

    async def admit_plan(
        self, plan: Plan, tokens: int, now: float, lease: str | None = None, hold: int = 0
    ) -> Admission:
        return self.take(plan, tokens, now, lease, hold)

    def take(
        self,
        plan: Plan,
        tokens: int,
        now: float,
        lease: str | int | None = None,
        hold: int = 0,
    ) -> Admission:
        """Admit now (it never waits: the dispatcher calls it without a coroutine)."""
        program = plan.local
        if program is None or program.key is not self.key:
            program = plan.local = self._compile(plan)
        if program.budget:
            months = self._months
            if not months.start <= now < months.end:
                self._turn_month(now)
        second = int(now)
        # Check every limit before taking from any: a refused request takes nothing.
        for slot in program.slots:
            limit = slot.rpm
            if limit >= 0:
                admitted = slot.admitted
                if admitted and admitted[0] <= now - WINDOW_S:
                    _expire_rpm(admitted, now - WINDOW_S)
                if len(admitted) >= limit:
                    raise self._refusal(slot, _RPM, now)
            limit = slot.tpm
            if limit >= 0:
                state = slot.state
                if state.first <= second - TPM_BUCKETS and (slot.buckets or state.open_second >= 0):
                    state.expire_tpm(second - TPM_BUCKETS + 1)
                if state.tpm_used + (tokens if tokens < limit else limit) > limit:
                    raise self._refusal(slot, _TPM, now)
            limit = slot.concurrency
            if limit >= 0 and len(slot.leases) >= limit:
                raise self._refusal(slot, _CONCURRENCY, now)
            limit = slot.budget
            if limit >= 0 and slot.state.spent + slot.state.held >= limit:
                raise self._refusal(slot, _BUDGET, now)
        if lease is None and program.leased:
            self._lease_seq += 1
            lease = self._lease_seq
        # Take, and find the tightest limit: the smallest share left (left / limit), the
        # first on ties. As floats: an exact cross-multiplication of large limits (budgets
        # in micro-USD) overflows compiled code's machine integers into slow big ones, and
        # equal ratios of integers below 2**53 divide to equal floats. (Every limit is >= 1
        # here: a zero budget refuses above.)
        best_left, best_share, top = 1, 2.0, -1
        for slot in program.slots:
            limit = slot.rpm
            if limit >= 0:
                admitted = slot.admitted
                if admitted and now < admitted[-1]:  # the clock stepped back: keep the order
                    bisect.insort(admitted, now)
                else:
                    admitted.append(now)
                left = limit - len(admitted)
                if left / limit < best_share:
                    best_left, best_share, top = left, left / limit, slot.at
            limit = slot.tpm
            if limit >= 0:
                state = slot.state
                state.take_tpm(second, tokens if tokens < limit else limit)
                left = limit - state.tpm_used
                if left / limit < best_share:
                    best_left, best_share, top = left, left / limit, slot.at + _TPM
            limit = slot.concurrency
            if limit >= 0:
                leases = slot.leases
                leases.add(lease)  # made above when None
                left = limit - len(leases)
                if left / limit < best_share:
                    best_left, best_share, top = left, left / limit, slot.at + _CONCURRENCY
            limit = slot.budget
            if limit >= 0:
                state = slot.state
                state.held += hold
                left = limit - state.spent - state.held
                if left / limit < best_share:
                    best_left, best_share, top = left, left / limit, slot.at + _BUDGET
        admission = Admission()
        admission.program, admission.tokens, admission.now = program, tokens, now
        admission.lease, admission.settled = lease, False
        admission.held = hold if program.budget else 0
        admission.top, admission.left = top, best_left
        if top < 0:
            admission.reset = 0.0
        elif top & 3 == _RPM:  # the usual tightest: recovers when the oldest leaves
            admission.reset = program.slots[top >> 2].admitted[0] + WINDOW_S - now
        else:
            admission.reset = self._reset(program, top, now)
        return admission

    def _reset(self, program: LocalProgram, top: int, now: float) -> float:
        """Seconds until the tightest limit recovers (the oldest request leaves the window,
        a lease frees, the month turns)."""
        kind = top & 3
        if kind == _RPM:
            return program.slots[top >> 2].state.rpm_reset(now)
        if kind == _TPM:
            return program.slots[top >> 2].state.tpm_reset(now)
        return 1.0 if kind == _CONCURRENCY else self._budget_reset(now)

    def _compile(self, plan: Plan) -> LocalProgram:
        share = self.share
        scopes = plan.scopes if share <= 1 else tuple(s.shared(share) for s in plan.scopes)
        return LocalProgram(self, scopes)

    def _budget_reset(self, now: float) -> float:
        return self._months.end - now if now >= self._months.start else _FAR

    def _refusal(self, slot: _Slot, kind: int, now: float) -> LimitExceeded:
        """The 429 of limit `kind` of `slot`, which refuses (the refused path: no hurry)."""
        state, holder = slot.state, slot.scope.kind
        if kind == _RPM:
            reset = state.rpm_reset(now)
            return LimitExceeded(Quota(LimitKind.RPM, holder, slot.rpm, 0, reset), reset)
        if kind == _TPM:
            reset = state.tpm_reset(now)
            left = slot.tpm - state.tpm_used
            return LimitExceeded(Quota(LimitKind.TPM, holder, slot.tpm, left, reset), reset)
        if kind == _CONCURRENCY:
            quota = Quota(LimitKind.CONCURRENCY, holder, slot.concurrency, 0, 1.0)
            return LimitExceeded(quota, 1.0)
        reset = self._budget_reset(now)
        left = slot.budget - state.spent - state.held
        return LimitExceeded(Quota(LimitKind.BUDGET, holder, slot.budget, left, reset), reset)

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        if admission.settled:
            return
        admission.settled = True
        program = admission.program
        assert type(program) is LocalProgram  # made by this limiter
        if program.leased:
            lease = admission.lease
            for leases in program.leased:
                leases.discard(lease)
        if tokens is not None:  # None from the gateway when nothing has tpm
            second = int(admission.now)
            asked = admission.tokens
            for state, limit in program.tpm:
                delta = tokens - (asked if asked < limit else limit)
                if second == state.open_second:
                    state.open_tokens += delta
                elif second in state.buckets:
                    state.buckets[second] += delta
                else:
                    continue  # its second has left the window already
                state.tpm_used += delta
        held = admission.held
        if held:
            for state in program.budget:
                state.held -= held
        if cost_micros and program.budget:
            # A request admitted last month and settled in this one: Redis charges the month
            # it was admitted in, which here is already gone.
            now, months = admission.now, self._months
            if (months.start <= now < months.end and months.name == self._month) or months.of(
                now
            ) == self._turn_month(now):
                for state in program.budget:
                    state.spent += cost_micros
                    state.counted = True

    def add_spend(self, name: str, cost_micros: int, now: float) -> None:
        """Spend taken elsewhere (a request admitted by Redis, settled while Redis was
        down): counted here too, so the fallback does not overspend."""
        if self._months.of(now) == self._turn_month(now):
            state = self.state(name)
            state.spent += cost_micros
            state.counted = True

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None:
        if month < self._month:
            return
        if month > self._month:
            self._new_month(month)
        for name, micros in spend.items():
            state = self.state(name)
            if not state.counted:
                state.spent, state.counted = micros, True

    def spent(self, name: str) -> int:
        state = self.states.get(name)
        return 0 if state is None else state.spent

    def in_flight(self, name: str) -> int:
        state = self.states.get(name)
        return 0 if state is None else len(state.leases)

    def _turn_month(self, now: float) -> str:
        """The month spend is counted in; only forward ("YYYY-MM" sorts by time): a late
        settle must not turn it back."""
        month = self._months.of(now)
        if month > self._month:
            self._new_month(month)
        return self._month

    def _new_month(self, month: str) -> None:
        self._month = month
        for state in self.states.values():
            state.spent, state.counted = 0, False

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

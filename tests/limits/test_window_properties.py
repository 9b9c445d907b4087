"""The window arithmetic, by property: LocalLimiter against a plain model written here, then
RedisLimiter against LocalLimiter, decision for decision, on the same generated sequences."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from llmrelay.limits.base import (
    LEASE_TTL_S,
    WINDOW_S,
    Admission,
    Demand,
    Limiter,
    LimitKind,
    Quota,
    Scope,
    ScopeKind,
    month_of,
)
from llmrelay.limits.errors import LimitExceeded
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.redis import RedisLimiter
from tests.conftest import need_redis
from tests.support.services import REDIS_URL

#: Mid-month: a sequence (at most 60 steps of 90 s) never crosses a month.
T0 = datetime(2025, 3, 10, 12, tzinfo=UTC).timestamp()


class Step(NamedTuple):
    """advance the clock by `dt`; admit a request of `tokens`; settle the held admission
    at `pick` (modulo) with `tokens` really used and `cost`."""

    kind: str
    dt: float = 0.0
    tokens: int = 0
    pick: int = 0
    cost: int = 0


#: ("ok", quota, reserved, bucket) or ("refused", quota, headers).
Outcome = tuple[object, ...]


def scopes_of(kind: ScopeKind, ident: str) -> st.SearchStrategy[Scope]:
    return st.builds(
        Scope,
        st.just(kind),
        st.just(ident),
        st.none() | st.integers(1, 10),
        st.none() | st.integers(50, 1000),
        st.none() | st.integers(1, 4),
        st.none() | st.integers(100, 1500),
    )


SCOPES = st.tuples(scopes_of(ScopeKind.KEY, "k")) | st.tuples(
    scopes_of(ScopeKind.KEY, "k"), scopes_of(ScopeKind.PROJECT, "p")
)
#: Mostly short steps (windows fill up), sometimes long ones and the window's edges.
ADVANCE = st.builds(
    Step,
    st.just("advance"),
    dt=st.floats(0, 3) | st.floats(0, 90) | st.sampled_from([1.0, 59.5, 60.0, 61.0]),
)
ADMIT = st.builds(Step, st.just("admit"), tokens=st.integers(1, 500))
SETTLE = st.builds(
    Step,
    st.just("settle"),
    pick=st.integers(0, 99),
    tokens=st.integers(0, 500),
    cost=st.integers(0, 400),
)
STEPS = st.lists(ADVANCE | ADMIT | ADMIT | SETTLE, min_size=10, max_size=60)
START = st.floats(0, 1, exclude_max=True).map(lambda f: T0 + f)


@dataclass
class _Entry:
    """One admission's tpm tokens in its second; dropped with its second's bucket."""

    second: int
    tokens: int
    alive: bool = True


@dataclass
class Model:
    """The limits as plainly as they can be said: lists and sets, no cleverness."""

    times: dict[str, list[float]] = field(default_factory=dict)
    entries: dict[str, list[_Entry]] = field(default_factory=dict)
    leases: dict[str, set[str]] = field(default_factory=dict)
    spend: dict[tuple[str, str], int] = field(default_factory=dict)
    mine: dict[tuple[str, str], _Entry] = field(default_factory=dict)  # (lease, scope)

    def admit(self, demand: Demand) -> tuple[LimitKind, ScopeKind] | None:
        now = demand.now
        for s in demand.scopes:
            times = self.times.setdefault(s.name, [])
            entries = self.entries.setdefault(s.name, [])
            leases = self.leases.setdefault(s.name, set())
            for entry in entries:
                if entry.second < int(now) - WINDOW_S:
                    entry.alive = False
            if s.rpm is not None and sum(t > now - WINDOW_S for t in times) >= s.rpm:
                return LimitKind.RPM, s.kind
            used = sum(e.tokens for e in entries if e.alive)
            if s.tpm is not None and used + min(demand.tokens, s.tpm) > s.tpm:
                return LimitKind.TPM, s.kind
            if s.concurrency is not None and len(leases) >= s.concurrency:
                return LimitKind.CONCURRENCY, s.kind
            spent = self.spend.get((s.name, month_of(now)), 0)
            if s.budget_micros is not None and spent >= s.budget_micros:
                return LimitKind.BUDGET, s.kind
        for s in demand.scopes:
            if s.rpm is not None:
                self.times[s.name].append(now)
            if s.tpm is not None:
                entry = _Entry(int(now), min(demand.tokens, s.tpm))
                self.entries[s.name].append(entry)
                self.mine[demand.lease_id, s.name] = entry
            if s.concurrency is not None:
                self.leases[s.name].add(demand.lease_id)
        return None

    def settle(self, demand: Demand, tokens: int | None, cost: int) -> None:
        for s in demand.scopes:
            self.leases[s.name].discard(demand.lease_id)
            entry = self.mine.get((demand.lease_id, s.name))
            if entry is not None and entry.alive and tokens is not None:
                entry.tokens = tokens
            if cost and s.budget_micros is not None:
                key = (s.name, month_of(demand.now))
                self.spend[key] = self.spend.get(key, 0) + cost


def decision(outcome: Outcome) -> tuple[LimitKind, ScopeKind] | None:
    if outcome[0] == "ok":
        return None
    quota = outcome[1]
    assert isinstance(quota, Quota)
    return quota.kind, quota.scope


async def drive(
    limiter: Limiter,
    scopes: tuple[Scope, ...],
    start: float,
    steps: list[Step],
    *,
    expire_leases: bool,
    flush: Callable[[], Awaitable[None]] | None = None,
    model: Model | None = None,
) -> list[Outcome]:
    """Play `steps`; with `expire_leases`, a request whose lease would have run out (it is
    never renewed here) ends first: local leases do not run out, Redis leases do."""
    now = start
    held: list[tuple[Admission, Demand]] = []
    outcomes: list[Outcome] = []

    async def settle(taken: tuple[Admission, Demand], tokens: int | None, cost: int) -> None:
        limiter.settle(taken[0], tokens, cost)
        if model is not None:
            model.settle(taken[1], tokens, cost)
        if flush is not None:
            await flush()

    for i, step in enumerate(steps):
        if step.kind == "advance":
            now += step.dt
        elif step.kind == "admit":
            if expire_leases:
                for stale in [t for t in held if t[1].now + LEASE_TTL_S <= now]:
                    held.remove(stale)
                    await settle(stale, None, 0)
            demand = Demand(scopes, f"lease-{i}", step.tokens, now)
            expected = model.admit(demand) if model is not None else None
            try:
                admission = await limiter.admit(demand)
            except LimitExceeded as exc:
                outcomes.append(("refused", exc.quota, exc.headers))
            else:
                held.append((admission, demand))
                outcomes.append(("ok", admission.quota, admission.reserved, admission.bucket))
            if model is not None:
                assert decision(outcomes[-1]) == expected, (i, outcomes[-1])
        elif held:
            await settle(held.pop(step.pick % len(held)), step.tokens, step.cost)
    return outcomes


def admit_times(start: float, steps: list[Step]) -> list[float]:
    now, times = start, []
    for step in steps:
        if step.kind == "advance":
            now += step.dt
        elif step.kind == "admit":
            times.append(now)
    return times


#: An admission exactly one window after the first: the first has just left it.
EDGE = {
    "scopes": (Scope(ScopeKind.KEY, "k", rpm=1, tpm=100),),
    "start": T0,
    "steps": [Step("admit", tokens=100), Step("advance", dt=60.0), Step("admit", tokens=100)],
}


@settings(max_examples=300, deadline=None)
@given(scopes=SCOPES, start=START, steps=STEPS)
@example(**EDGE)
def test_local_limiter_agrees_with_the_model(
    scopes: tuple[Scope, ...], start: float, steps: list[Step]
) -> None:
    model = Model()
    outcomes = asyncio.run(
        drive(LocalLimiter(), scopes, start, steps, expire_leases=False, model=model)
    )
    # Never more than rpm admissions in any 60 s interval (ending at an admission).
    times = admit_times(start, steps)
    admitted = sorted(t for t, o in zip(times, outcomes, strict=True) if o[0] == "ok")
    for s in scopes:
        if s.rpm is not None:
            for t in admitted:
                assert sum(t - WINDOW_S < u <= t for u in admitted) <= s.rpm


@pytest.mark.redis
@settings(max_examples=40, deadline=None)
@given(scopes=SCOPES, start=START, steps=STEPS)
@example(**EDGE)
def test_redis_limiter_decides_as_local_does(
    scopes: tuple[Scope, ...], start: float, steps: list[Step]
) -> None:
    need_redis()
    local = asyncio.run(drive(LocalLimiter(), scopes, start, steps, expire_leases=True))
    assert asyncio.run(on_redis(scopes, start, steps)) == local


async def on_redis(scopes: tuple[Scope, ...], start: float, steps: list[Step]) -> list[Outcome]:
    prefix = f"test:limits:{uuid.uuid4().hex}:"
    limiter = RedisLimiter(REDIS_URL, prefix=prefix, timeout_s=2.0)
    await limiter.start()
    try:
        return await drive(limiter, scopes, start, steps, expire_leases=True, flush=limiter.flush)
    finally:
        await limiter.close()
        raw: Redis = Redis.from_url(REDIS_URL)
        keys = [k async for k in raw.scan_iter(match=f"{prefix}*")]
        if keys:
            await raw.delete(*keys)
        await raw.aclose()


def test_local_late_settle_keeps_the_new_months_spend() -> None:
    """A request admitted last month and settled in this one does not turn the month back
    (it once reset the new month's spend to 0)."""
    next_month = datetime(2025, 4, 1, tzinfo=UTC).timestamp()
    scope = Scope(ScopeKind.KEY, "k", budget_micros=1000)
    local = LocalLimiter()
    old = local.admit_now(Demand((scope,), "old", 1, next_month - 1))
    new = local.admit_now(Demand((scope,), "new", 1, next_month + 1))
    local.settle(new, None, 800)
    local.settle(old, None, 300)
    local.admit_now(Demand((scope,), "probe", 1, next_month + 2))
    assert local.spent(scope.name) == 800

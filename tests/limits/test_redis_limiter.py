"""RedisLimiter against the real Redis: exact limits, nothing taken on refusal, settles,
leases, budgets, races between concurrent admissions, and the same figures as local."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from llmrelay.limits.base import (
    LEASE_TTL_S,
    Admission,
    Demand,
    LimitKind,
    Scope,
    ScopeKind,
    month_of,
    seconds_to_next_month,
)
from llmrelay.limits.errors import BackendUnavailable, LimitExceeded
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.redis import RedisLimiter, RedisProgram
from tests.conftest import need_redis
from tests.support.ports import free_port
from tests.support.services import REDIS_URL
from tests.support.silent_server import silent_server

pytestmark = pytest.mark.redis

#: Mid-month, with a fraction: windows are cut at sub-second instants.
T0 = datetime(2025, 3, 10, 12, tzinfo=UTC).timestamp() + 0.375
NEXT_MONTH = datetime(2025, 4, 1, tzinfo=UTC).timestamp() + 0.5


def key(**limits: int) -> Scope:
    return Scope(ScopeKind.KEY, "k1", **limits)


def project(**limits: int) -> Scope:
    return Scope(ScopeKind.PROJECT, "p1", **limits)


def demand(*scopes: Scope, now: float, tokens: int = 10) -> Demand:
    return Demand(scopes, uuid.uuid4().hex, tokens, now)


async def refused(limiter: RedisLimiter, d: Demand) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as caught:
        await limiter.admit(d)
    return caught.value


async def buckets(raw: Redis, key: str) -> dict[str, str]:
    """A tpm hash's one-second buckets (the fields that are seconds: not TOTAL or LOW)."""
    fields = {str(f): str(v) for f, v in (await raw.hgetall(key)).items()}
    return {f: v for f, v in fields.items() if not f.startswith("-")}


async def delete_keys(raw: Redis, prefix: str) -> None:
    keys = [k async for k in raw.scan_iter(match=f"{prefix}*")]
    if keys:
        await raw.delete(*keys)


@pytest.fixture
async def raw() -> AsyncIterator[Redis]:
    need_redis()
    client: Redis = Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
async def prefix(raw: Redis) -> AsyncIterator[str]:
    value = f"test:limits:{uuid.uuid4().hex}:"
    yield value
    await delete_keys(raw, value)


@pytest.fixture
async def limiter(prefix: str) -> AsyncIterator[RedisLimiter]:
    limiter = RedisLimiter(REDIS_URL, prefix=prefix, timeout_s=2.0)
    await limiter.start()
    yield limiter
    await limiter.close()


async def test_rpm_admits_exactly_the_limit_then_says_when_to_come_back(
    limiter: RedisLimiter,
) -> None:
    scope = key(rpm=5)
    for i in range(5):
        await limiter.admit(demand(scope, now=T0 + i * 0.5))
    exc = await refused(limiter, demand(scope, now=T0 + 3))
    assert (exc.quota.kind, exc.quota.scope) == (LimitKind.RPM, ScopeKind.KEY)
    assert exc.quota.remaining == 0
    assert exc.headers["Retry-After"] == "57"  # the first admission leaves at T0 + 60
    await refused(limiter, demand(scope, now=T0 + 59.999))
    admission = await limiter.admit(demand(scope, now=T0 + 60))
    assert admission.quota is not None
    assert admission.quota.remaining == 0


async def test_a_refused_request_takes_nothing_from_any_scope(
    limiter: RedisLimiter, raw: Redis, prefix: str
) -> None:
    k, p = key(rpm=5, concurrency=3), project(tpm=100)
    await limiter.admit(demand(k, p, now=T0, tokens=80))
    exc = await refused(limiter, demand(k, p, now=T0 + 1, tokens=50))
    assert (exc.quota.kind, exc.quota.scope) == (LimitKind.TPM, ScopeKind.PROJECT)
    assert await raw.zcard(f"{prefix}key:k1:rpm") == 1
    assert await raw.zcard(f"{prefix}key:k1:leases") == 1
    assert await buckets(raw, f"{prefix}project:p1:tpm") == {str(int(T0)): "80"}


async def test_tpm_reservation_is_reconciled_with_real_usage(
    limiter: RedisLimiter, raw: Redis, prefix: str
) -> None:
    scope = key(tpm=1000)
    first = await limiter.admit(demand(scope, now=T0, tokens=600))
    assert first.reserved == {"key:k1": 600}
    await refused(limiter, demand(scope, now=T0 + 1, tokens=700))
    limiter.settle(first, 200, 0)
    await limiter.flush()
    second = await limiter.admit(demand(scope, now=T0 + 1, tokens=700))
    limiter.settle(second, 650, 0)
    unknown = await limiter.admit(demand(scope, now=T0 + 2, tokens=100))
    limiter.settle(unknown, None, 0)  # usage unknown: the estimate stands
    await limiter.flush()
    window = await buckets(raw, f"{prefix}key:k1:tpm")
    assert sum(int(v) for v in window.values()) == 200 + 650 + 100
    assert await raw.hget(f"{prefix}key:k1:tpm", "-1") == str(200 + 650 + 100)  # TOTAL


async def test_the_tpm_total_follows_buckets_through_settles_and_the_window(
    limiter: RedisLimiter, raw: Redis, prefix: str
) -> None:
    """TOTAL and LOW (fields -1 and -2) stay the sum and the oldest of the buckets present,
    also after a settle to a bucket that left the window and while buckets leave."""
    scope, tpm = key(tpm=10_000), f"{prefix}key:k1:tpm"
    start = int(T0)
    held = [await limiter.admit(demand(scope, now=start + t, tokens=100)) for t in range(0, 90, 7)]
    for i, admission in enumerate(held):
        limiter.settle(admission, 40 + 30 * i, 0)
    await limiter.flush()
    for t in (90, 91, 150, 500):  # buckets leave, then all of them
        await limiter.admit(demand(scope, now=start + t + 0.25, tokens=5))
        fields = await raw.hgetall(tpm)
        window = await buckets(raw, tpm)
        assert min(window) == fields["-2"] and all(int(s) > start + t - 61 for s in window)
        assert sum(int(v) for v in window.values()) == int(fields["-1"])


async def test_a_tpm_hash_without_its_total_is_recounted(
    limiter: RedisLimiter, raw: Redis, prefix: str
) -> None:
    """Buckets written without TOTAL and LOW (by an earlier version) are summed once."""
    tpm, start = f"{prefix}key:k1:tpm", int(T0)
    await raw.hset(tpm, mapping={str(start - 61): 500, str(start - 30): 300, str(start): 200})
    exc = await refused(limiter, demand(key(tpm=1000), now=T0, tokens=501))
    assert (exc.quota.remaining, exc.headers["Retry-After"]) == (500, "31")
    assert await raw.hgetall(tpm) == {
        str(start - 30): "300",
        str(start): "200",
        "-1": "500",
        "-2": str(start - 30),
    }


async def test_a_reservation_larger_than_the_limit_fits_an_empty_window(
    limiter: RedisLimiter,
) -> None:
    scope = key(tpm=100)
    admission = await limiter.admit(demand(scope, now=T0, tokens=5000))
    assert admission.reserved == {"key:k1": 100}
    exc = await refused(limiter, demand(scope, now=T0 + 0.5, tokens=1))
    assert exc.quota.kind is LimitKind.TPM
    assert exc.headers["Retry-After"] == str(math.ceil(int(T0) + 61 - (T0 + 0.5)))
    await limiter.admit(demand(scope, now=int(T0) + 61, tokens=1))


async def test_concurrency_leases_free_on_settle_and_run_out(limiter: RedisLimiter) -> None:
    scope = key(concurrency=2)
    first = await limiter.admit(demand(scope, now=T0))
    await limiter.admit(demand(scope, now=T0 + 1))
    exc = await refused(limiter, demand(scope, now=T0 + 2))
    assert (exc.quota.kind, exc.headers["Retry-After"]) == (LimitKind.CONCURRENCY, "1")
    limiter.settle(first, None, 0)
    limiter.settle(first, None, 0)  # idempotent
    await limiter.flush()
    assert await limiter.in_flight("key:k1", T0 + 2) == 1
    await limiter.admit(demand(scope, now=T0 + 2))
    await refused(limiter, demand(scope, now=T0 + 3))
    # The lease taken at T0 + 1 was never renewed: at T0 + 1 + LEASE_TTL_S it has run out.
    assert await limiter.in_flight("key:k1", T0 + 1 + LEASE_TTL_S) == 1
    await limiter.admit(demand(scope, now=T0 + 1 + LEASE_TTL_S))


async def test_live_leases_are_renewed(limiter: RedisLimiter) -> None:
    now = time.time()
    held = await limiter.admit(demand(key(concurrency=1), now=now - LEASE_TTL_S + 5))
    await limiter._tick()
    assert await limiter.in_flight("key:k1", time.time() + 10) == 1
    limiter.settle(held, None, 0)
    await limiter.flush()
    assert await limiter.in_flight("key:k1", time.time()) == 0


async def test_budget_refuses_until_the_month_turns(limiter: RedisLimiter) -> None:
    scope = key(budget_micros=1000)
    await limiter.seed_spend_now(month_of(T0), {"key:k1": 900})
    admission = await limiter.admit(demand(scope, now=T0))
    assert admission.quota is not None
    assert (admission.quota.kind, admission.quota.remaining) == (LimitKind.BUDGET, 100)
    limiter.settle(admission, 50, 150)
    await limiter.flush()
    assert await limiter.spent("key:k1", month_of(T0)) == 1050
    exc = await refused(limiter, demand(scope, now=T0 + 5))
    assert (exc.quota.kind, exc.quota.remaining) == (LimitKind.BUDGET, -50)
    assert exc.headers["Retry-After"] == str(math.ceil(seconds_to_next_month(T0 + 5)))
    await limiter.admit(demand(scope, now=NEXT_MONTH))


async def test_a_late_settle_charges_the_month_it_was_admitted_in(limiter: RedisLimiter) -> None:
    scope = key(budget_micros=1000)
    old = await limiter.admit(demand(scope, now=NEXT_MONTH - 1))
    new = await limiter.admit(demand(scope, now=NEXT_MONTH + 1))
    limiter.settle(new, None, 800)
    limiter.settle(old, None, 300)
    await limiter.flush()
    assert await limiter.spent("key:k1", month_of(NEXT_MONTH)) == 800
    assert await limiter.spent("key:k1", month_of(NEXT_MONTH - 1)) == 300


async def test_seeding_does_not_overwrite_a_counter(limiter: RedisLimiter) -> None:
    month = month_of(T0)
    await limiter.seed_spend_now(month, {"key:k1": 500})
    await limiter.seed_spend_now(month, {"key:k1": 100, "project:p1": 7})
    limiter.seed_spend(month, {"key:k1": 1, "project:p1": 1, "key:k2": 3})
    await limiter.flush()
    assert [await limiter.spent(n, month) for n in ("key:k1", "project:p1", "key:k2")] == [
        500,
        7,
        3,
    ]


async def test_concurrent_admissions_never_exceed_the_limit(limiter: RedisLimiter) -> None:
    scope = key(rpm=50)
    demands = [demand(scope, now=T0 + i / 1000) for i in range(200)]
    results = await asyncio.gather(*(limiter.admit(d) for d in demands), return_exceptions=True)
    admitted = [r for r in results if isinstance(r, Admission)]
    assert len(admitted) == 50
    assert all(isinstance(r, LimitExceeded) for r in results if not isinstance(r, Admission))


async def test_an_unreachable_redis_is_backend_unavailable() -> None:
    failed: list[tuple[int | None, int]] = []
    limiter = RedisLimiter(
        f"redis://127.0.0.1:{free_port()}/0",
        on_settle_failed=lambda _a, tokens, cost: failed.append((tokens, cost)),
    )
    await limiter.start()  # does not raise: Redis may come back later
    with pytest.raises(BackendUnavailable):
        await limiter.admit(demand(key(rpm=1), now=T0))
    assert not await limiter.ping()
    assert limiter.replicas() == 1
    admission = Admission()  # as an admission before Redis went away would be
    admission.program = RedisProgram(limiter, (key(budget_micros=5),))
    admission.tokens, admission.now, admission.lease, admission.held = 10, T0, "lease", 0
    admission.top, admission.left, admission.reset, admission.settled = -1, 0, 0.0, False
    limiter.settle(admission, 20, 30)
    await limiter.flush()
    assert failed == [(20, 30)]
    await limiter.close()


async def test_replicas_count_live_heartbeats(prefix: str) -> None:
    a = RedisLimiter(REDIS_URL, prefix=prefix, timeout_s=2.0)
    b = RedisLimiter(REDIS_URL, prefix=prefix, timeout_s=2.0)
    await a.start()
    await b.start()
    await b._tick()
    await a._tick()
    assert (a.replicas(), await a.ping()) == (2, True)
    await a.close()
    await b.close()


async def test_figures_equal_local_for_the_same_sequence(limiter: RedisLimiter) -> None:
    local = LocalLimiter()
    k = key(rpm=4, tpm=900, concurrency=3, budget_micros=2000)
    p = project(rpm=6, tpm=1200, budget_micros=5000)
    await limiter.seed_spend_now(month_of(T0), {"key:k1": 300, "project:p1": 100})
    local.seed_spend(month_of(T0), {"key:k1": 300, "project:p1": 100})
    held: list[list[Admission]] = []
    for i in range(14):
        now = T0 + i * 7.3
        d = demand(k, p, now=now, tokens=150 + 40 * i)
        outcomes: list[tuple[object, ...]] = []
        taken: list[Admission] = []
        for lim in (local, limiter):
            try:
                a = await lim.admit(d)
                taken.append(a)
                outcomes.append(("ok", a.quota, a.reserved, a.bucket))
            except LimitExceeded as exc:
                outcomes.append(("refused", exc.quota, exc.headers))
        assert outcomes[0] == outcomes[1], i
        if taken:
            held.append(taken)
        if i % 3 == 2 and held:
            local_admission, redis_admission = held.pop(0)
            local.settle(local_admission, 90, 400)
            limiter.settle(redis_admission, 90, 400)
            await limiter.flush()
    assert await limiter.spent("key:k1", month_of(T0)) == local.spent("key:k1")


async def test_new_limits_of_a_scope_apply_at_once(limiter: RedisLimiter) -> None:
    await limiter.admit(demand(key(rpm=1), now=T0))
    await refused(limiter, demand(key(rpm=1), now=T0 + 1))
    admission = await limiter.admit(demand(key(rpm=3), now=T0 + 2))  # same scope, raised
    assert admission.quota is not None
    assert (admission.quota.limit, admission.quota.remaining) == (3, 1)


async def test_scripts_flushed_from_redis_are_loaded_again(
    limiter: RedisLimiter, raw: Redis
) -> None:
    scope = key(tpm=1000, budget_micros=10_000)
    first = await limiter.admit(demand(scope, now=T0, tokens=100))
    await raw.script_flush()
    second = await limiter.admit(demand(scope, now=T0 + 1, tokens=100))
    limiter.settle(first, 10, 7)
    await raw.script_flush()
    limiter.settle(second, 10, 8)
    await limiter.flush()
    assert await limiter.spent("key:k1", month_of(T0)) == 15


async def test_a_silent_redis_is_backend_unavailable_within_the_timeout() -> None:
    async with silent_server() as (url, _):
        limiter = RedisLimiter(url, timeout_s=0.2)
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable):
                await limiter.admit(demand(key(rpm=1), now=T0))
            assert time.monotonic() - started < 10  # at the timeout: it never answers
        finally:
            await limiter.close()

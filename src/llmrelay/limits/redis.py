"""The shared limiter: every replica admits against the same counters in Redis.

An admission is one Lua script (one round trip, atomic): it checks every limit of every
scope exactly as LocalLimiter does and takes from all of them only if all admit. Settles,
lease renewals, the replica heartbeat and spend seeding go through one background task, so
`settle` never blocks a response. Times travel as strings (Python's repr round-trips a
double exactly), so windows are cut at exactly the same instants as in local.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import structlog
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from llmrelay.limits.base import (
    LEASE_TTL_S,
    TPM_BUCKETS,
    WINDOW_S,
    Admission,
    BackendUnavailable,
    Demand,
    LimitExceeded,
    LimitKind,
    Quota,
    Scope,
    month_of,
    seconds_to_next_month,
    tightest,
)
from llmrelay.limits.redis_scripts import ADMIT, SETTLE

log = structlog.get_logger(__name__)

#: Key lifetimes: a little longer than the data in them matters, so idle keys go away.
RPM_TTL_MS = (WINDOW_S + 1) * 1000
TPM_TTL_MS = (TPM_BUCKETS + 1) * 1000
LEASES_TTL_MS = int((LEASE_TTL_S + 10) * 1000)
SPEND_TTL_S = 40 * 86400
#: A replica that misses this many seconds of heartbeats no longer counts for the share.
HEARTBEAT_TTL_S = 15.0
RENEW_EVERY_S = LEASE_TTL_S / 3
#: Settles sent per script call (one round trip for a burst of finished requests).
SETTLE_BATCH = 64
CLOSE_DRAIN_S = 2.0
MAX_CONNECTIONS = 64
_ERRORS = (RedisError, OSError)  # OSError covers TimeoutError and asyncio.TimeoutError
_FIGURES = 6  # per scope: rpm count, oldest, tpm used, oldest second, leases, spent

_KINDS = (LimitKind.RPM, LimitKind.TPM, LimitKind.CONCURRENCY, LimitKind.BUDGET)


@dataclass(frozen=True, slots=True)
class _Settle:
    admission: Admission
    tokens: int | None
    cost_micros: int


@dataclass(frozen=True, slots=True)
class _Seed:
    month: str
    spend: Mapping[str, int]


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


class RedisLimiter:
    """Limits shared by every replica that points at the same Redis and prefix."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "llmrelay:limits:",
        replica_id: str | None = None,
        on_settle_failed: Callable[[Admission, int | None, int], None] | None = None,
        timeout_s: float = 0.25,
    ) -> None:
        # No retries: a retried admission could be taken twice, and a dead Redis must be
        # noticed within the timeout so resilient.py can fall back at once. A bounded pool
        # that waits for a free connection: a burst queues instead of failing open.
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=max(1.0, 4 * timeout_s),
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            decode_responses=True,
            retry=Retry(NoBackoff(), 0),
        )
        self._redis: Redis = Redis.from_pool(pool)
        self._prefix = prefix
        self.replica_id = replica_id or uuid.uuid4().hex
        self._on_settle_failed = on_settle_failed
        self._admit = self._redis.register_script(ADMIT)
        self._settle = self._redis.register_script(SETTLE)
        self._seq = itertools.count()
        self._work: deque[_Settle | _Seed] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._live: dict[str, tuple[str, ...]] = {}  # lease id -> leases keys it sits in
        self._replicas = 1
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def _key(self, name: str, what: str) -> str:
        return f"{self._prefix}{name}:{what}"

    async def admit(self, demand: Demand) -> Admission:
        now = demand.now
        month = month_of(now)
        keys: list[str] = []
        args: list[str] = [
            repr(now),
            repr(now - WINDOW_S),
            str(int(now) - TPM_BUCKETS + 1),
            str(int(now)),
            repr(now + LEASE_TTL_S),
            str(demand.tokens),
            demand.lease_id,
            f"{demand.lease_id}:{next(self._seq)}",  # unique even if a lease id comes back
            str(RPM_TTL_MS),
            str(TPM_TTL_MS),
            str(LEASES_TTL_MS),
        ]
        for scope in demand.scopes:
            keys += [self._key(scope.name, w) for w in ("rpm", "tpm", "leases", f"spend:{month}")]
            args += [_opt(scope.rpm), _opt(scope.tpm), _opt(scope.concurrency)]
            args.append(_opt(scope.budget_micros))
        try:
            reply = cast(list[Any], await self._admit(keys=keys, args=args))
        except _ERRORS as exc:
            raise BackendUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if reply[0] == 0:
            scope, kind = demand.scopes[int(reply[1]) - 1], _KINDS[int(reply[2]) - 1]
            quota = _quota(scope, kind, reply[3], reply[4], now)
            raise LimitExceeded(quota, quota.reset_s)
        admission = Admission(demand, self, bucket=int(now))
        quotas: list[Quota] = []
        leases: list[str] = []
        for i, scope in enumerate(demand.scopes):
            f = reply[1 + i * _FIGURES : 1 + (i + 1) * _FIGURES]
            if scope.rpm is not None:
                quotas.append(_quota(scope, LimitKind.RPM, f[0], f[1], now))
            if scope.tpm is not None:
                admission.reserved[scope.name] = min(demand.tokens, scope.tpm)
                quotas.append(_quota(scope, LimitKind.TPM, f[2], f[3], now))
            if scope.concurrency is not None:
                leases.append(self._key(scope.name, "leases"))
                quotas.append(_quota(scope, LimitKind.CONCURRENCY, f[4], "", now))
            if scope.budget_micros is not None:
                quotas.append(_quota(scope, LimitKind.BUDGET, 0, f[5], now))
        if leases:
            self._live[demand.lease_id] = tuple(leases)
        admission.quota = tightest(quotas)
        return admission

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        if admission.settled:
            return
        admission.settled = True
        self._live.pop(admission.demand.lease_id, None)
        self._queue(_Settle(admission, tokens, cost_micros))

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None:
        self._queue(_Seed(month, dict(spend)))

    def _queue(self, item: _Settle | _Seed) -> None:
        self._work.append(item)
        self._idle.clear()
        self._wake.set()

    async def seed_spend_now(self, month: str, spend: Mapping[str, int]) -> None:
        """NX: a replica starting later must not overwrite a counter that already holds
        spend settled since the database was read."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for name, micros in spend.items():
                    pipe.set(self._key(name, f"spend:{month}"), micros, nx=True, ex=SPEND_TTL_S)
                await pipe.execute()
        except _ERRORS as exc:
            raise BackendUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def flush(self) -> None:
        """Wait until every queued settle and seed has been sent (or given up on)."""
        if self._task is None or self._task.done():
            while self._work:
                await self._send_some()
            self._idle.set()
        await self._idle.wait()

    async def _send_some(self) -> None:
        settles: list[_Settle] = []
        seeds: list[_Seed] = []
        while self._work and len(settles) < SETTLE_BATCH:
            item = self._work.popleft()
            if isinstance(item, _Settle):
                settles.append(item)
            else:
                seeds.append(item)
        for seed in seeds:
            try:
                await self.seed_spend_now(seed.month, seed.spend)
            except BackendUnavailable as exc:
                log.warning("limits_seed_failed", month=seed.month, error=str(exc))
        if settles:
            await self._send_settles(settles)

    async def _send_settles(self, settles: list[_Settle]) -> None:
        keys: list[str] = []
        args: list[str | int] = [SPEND_TTL_S, len(settles)]
        for item in settles:
            admission = item.admission
            demand = admission.demand
            month = month_of(demand.now)
            args += [demand.lease_id, admission.bucket, len(demand.scopes)]
            for scope in demand.scopes:
                keys += [self._key(scope.name, w) for w in ("leases", "tpm", f"spend:{month}")]
                reserved = admission.reserved.get(scope.name)
                delta = "" if reserved is None or item.tokens is None else item.tokens - reserved
                charge = item.cost_micros != 0 and scope.budget_micros is not None
                args += [delta, item.cost_micros if charge else ""]
        try:
            await self._settle(keys=keys, args=args)
        except (*_ERRORS, asyncio.CancelledError) as exc:
            self._give_up(settles, "limits_settle_failed", repr(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    def _give_up(self, settles: list[_Settle], event: str, error: str) -> None:
        """The wrapper keeps the spend locally, so a degraded replica does not overspend;
        the leases run out in Redis by themselves."""
        log.warning(event, settles=len(settles), error=error)
        if self._on_settle_failed is not None:
            for item in settles:
                self._on_settle_failed(item.admission, item.tokens, item.cost_micros)

    async def _tick(self) -> None:
        """Renew this process's live leases and beat the heart, in one round trip."""
        now = time.time()
        replicas = f"{self._prefix}replicas"
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zadd(replicas, {self.replica_id: now + HEARTBEAT_TTL_S})
                pipe.zremrangebyscore(replicas, "-inf", now)
                pipe.zcount(replicas, f"({now!r}", "+inf")
                pipe.expire(replicas, int(HEARTBEAT_TTL_S * 4))
                expiry = now + LEASE_TTL_S
                for lease_id, keys in list(self._live.items()):
                    for key in keys:
                        pipe.zadd(key, {lease_id: expiry}, xx=True)
                        pipe.pexpire(key, LEASES_TTL_MS)
                results = await pipe.execute()
        except _ERRORS as exc:
            if not self._closing:
                log.warning("limits_renew_failed", leases=len(self._live), error=repr(exc))
            return
        self._replicas = max(1, int(results[2]))

    def replicas(self) -> int:
        """Replicas alive at the last heartbeat (this one included): the fail-open share."""
        return self._replicas

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except _ERRORS:
            return False

    async def spent(self, name: str, month: str) -> int:
        return int(await self._redis.get(self._key(name, f"spend:{month}")) or 0)

    async def in_flight(self, name: str, now: float) -> int:
        return int(await self._redis.zcount(self._key(name, "leases"), f"({now!r}", "+inf"))

    async def start(self) -> None:
        """Redis may be down at start: the scripts load on first use then (NOSCRIPT)."""
        with contextlib.suppress(*_ERRORS):
            for script in (self._admit, self._settle):
                script.sha = await self._redis.script_load(script.script)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="redis-limiter")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        # Not `while True`: redis-py may turn a cancellation that lands in a command into a
        # ConnectionError, which the senders swallow; the flag ends the loop regardless.
        while not self._closing:
            delay = next_tick - loop.time()
            if not self._work and delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
            try:
                if self._work:
                    await self._send_some()
                if not self._work:
                    self._idle.set()
                if loop.time() >= next_tick:
                    await self._tick()
                    next_tick = loop.time() + RENEW_EVERY_S
            except Exception:  # a dead loop would stop every settle for good
                log.exception("limits_background_failed")
                await asyncio.sleep(0.1)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), CLOSE_DRAIN_S)
            self._closing = True
            self._wake.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif self._work:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.flush(), CLOSE_DRAIN_S)
        left = [item for item in self._work if isinstance(item, _Settle)]
        self._work.clear()
        if left:
            self._give_up(left, "limits_settles_dropped", "closing")
        await self._redis.aclose()


def _quota(scope: Scope, kind: LimitKind, count: int, text: str, now: float) -> Quota:
    """The figures LocalLimiter reports, from what the script counted (`text`: the oldest
    time or second, or the spend), in the same arithmetic order so the floats are equal."""
    limit = scope.limit(kind)
    assert limit is not None
    if kind is LimitKind.RPM:
        reset = float(text) + WINDOW_S - now if text else float(WINDOW_S)
    elif kind is LimitKind.TPM:
        reset = int(text) + TPM_BUCKETS - now if text else float(WINDOW_S)
    elif kind is LimitKind.CONCURRENCY:
        reset = 1.0
    else:
        count, reset = int(text), seconds_to_next_month(now)
    return Quota(kind, scope.kind, limit, limit - int(count), reset)

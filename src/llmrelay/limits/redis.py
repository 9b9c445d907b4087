"""The shared limiter: every replica admits against the same counters in Redis.

An admission is one Lua script (one round trip, atomic): it checks every limit of every
scope exactly as LocalLimiter does and takes from all of them only if all admit. Settles,
lease renewals, the replica heartbeat and spend seeding go through one background task, so
`settle` never blocks a response. Times travel as strings (Python's repr round-trips a
double exactly), so windows are cut at exactly the same instants as in local.py.

Every admission costs this process CPU, so the hot path is lean: resp.py's pipelined client
(not redis-py), key names and the packed arguments that rarely change kept per scope, and
only the tightest quota built.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import structlog

from llmrelay.limits.base import (
    LEASE_TTL_S,
    TPM_BUCKETS,
    WINDOW_S,
    Admission,
    BackendUnavailable,
    Demand,
    LimitExceeded,
    LimitKind,
    Months,
    Quota,
    Scope,
    seconds_to_next_month,
)
from llmrelay.limits.redis_scripts import ADMIT, SETTLE
from llmrelay.limits.resp import (
    Arg,
    RespClient,
    RespConnectionError,
    RespError,
    Script,
    pack_args,
)

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
#: Scopes whose key names are kept (more: the cache starts again, it only saves CPU).
KEYS_CACHED = 100_000
_ERRORS = (RespError, RespConnectionError)
_FIGURES = 6  # per scope: rpm count, oldest, tpm used, oldest second, leases, spent
_NONE = b""  # a limit the scope does not have, or a settle figure with nothing to do

#: The ttls, packed once: the same in every admission.
_TTLS = pack_args((RPM_TTL_MS, TPM_TTL_MS, LEASES_TTL_MS))
_KINDS = (LimitKind.RPM, LimitKind.TPM, LimitKind.CONCURRENCY, LimitKind.BUDGET)
#: Per kind: where its count and its text (see _quota) are among a scope's figures.
_FIGURE_AT = ((0, 1), (2, 3), (4, -1), (-1, 5))


class _Settle(NamedTuple):  # a tuple: made for every request, and cheap
    admission: Admission
    tokens: int | None
    cost_micros: int


class _Seed(NamedTuple):
    month: str
    spend: Mapping[str, int]


class _Keys:
    """One scope's key names and packed script arguments, built once for the scope (and
    month, and limits) instead of for every admission and settle."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.month, self.spend = prefix, "", ""
        self.rpm, self.tpm, self.leases = f"{prefix}rpm", f"{prefix}tpm", f"{prefix}leases"
        self.admit = self.settle = self.limits = b""
        self.scope: Scope | None = None

    def of_month(self, month: str) -> _Keys:
        if month != self.month:
            self.month, self.spend = month, f"{self.prefix}spend:{month}"
            self.admit = pack_args((self.rpm, self.tpm, self.leases, self.spend))
            self.settle = pack_args((self.leases, self.tpm, self.spend))
        return self

    def limits_of(self, scope: Scope) -> bytes:
        if scope is not self.scope:  # a frozen Scope: the same one has the same limits
            limits = (scope.rpm, scope.tpm, scope.concurrency, scope.budget_micros)
            self.limits = pack_args([_NONE if v is None else v for v in limits])
            self.scope = scope
        return self.limits


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
        # noticed within the timeout so resilient.py can fall back at once. One pipelined
        # connection: calls never wait for a free connection, only for Redis.
        self._redis = RespClient(url, timeout_s=timeout_s)
        self.timeout_s = timeout_s
        self.prefix = prefix
        self.replica_id = replica_id or uuid.uuid4().hex
        self._on_settle_failed = on_settle_failed
        self._admit = Script(self._redis, ADMIT)
        self._settle = Script(self._redis, SETTLE)
        self._seq = itertools.count()
        self._work: deque[_Settle | _Seed] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._live: dict[str, tuple[str, ...]] = {}  # lease id -> leases keys it sits in
        self._keys: dict[str, _Keys] = {}
        self._months = Months()
        self._replicas = 1
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def _keys_of(self, name: str) -> _Keys:
        keys = self._keys.get(name)
        if keys is None:
            if len(self._keys) >= KEYS_CACHED:
                self._keys.clear()
            keys = self._keys[name] = _Keys(f"{self.prefix}{name}:")
        return keys

    async def admit(self, demand: Demand) -> Admission:
        now = demand.now
        month = self._months.of(now)
        scopes = demand.scopes
        tokens = demand.tokens
        second = int(now)
        names: list[_Keys] = []
        limits: list[bytes] = []
        for scope in scopes:
            k = self._keys_of(scope.name).of_month(month)
            names.append(k)
            limits.append(k.limits_of(scope))
        lease = demand.lease_id
        member = f"{lease}:{next(self._seq)}"  # unique even if a lease id comes back
        # Floats travel as their repr (exact); the script compares them as Redis scores.
        times = (now, now - WINDOW_S, second - TPM_BUCKETS + 1, second, now + LEASE_TTL_S)
        parts = [k.admit for k in names]
        parts += (pack_args((*times, tokens, lease, member)), _TTLS, *limits)
        n = 4 * len(scopes)
        try:
            reply: list[Any] = await self._admit.run(
                self._admit.command(n, n + 11 + n, b"".join(parts))
            )
        except _ERRORS as exc:
            raise BackendUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if reply[0] == 0:
            scope, kind = scopes[int(reply[1]) - 1], _KINDS[int(reply[2]) - 1]
            quota = _quota(scope, kind, reply[3], reply[4], now)
            raise LimitExceeded(quota, quota.reset_s)
        admission = Admission(demand, self, bucket=second)
        leases: list[str] = []
        # The tightest quota, as local.py picks it (the smallest share left; ties: the
        # first, in the order rpm, tpm, concurrency, budget of each scope), built alone:
        # the others would be thrown away. `best`: scope index * 4 + kind index.
        best_remaining, best_limit, best = 0, 0, -1
        for i, scope in enumerate(scopes):
            at = 1 + i * _FIGURES
            rpm, tpm, conc, budget = scope.rpm, scope.tpm, scope.concurrency, scope.budget_micros
            if rpm is not None:
                left = rpm - reply[at]
                if best < 0 or left * best_limit < best_remaining * rpm:
                    best_remaining, best_limit, best = left, rpm, i * 4
            if tpm is not None:
                admission.reserved[scope.name] = tokens if tokens < tpm else tpm
                left = tpm - reply[at + 2]
                if best < 0 or left * best_limit < best_remaining * tpm:
                    best_remaining, best_limit, best = left, tpm, i * 4 + 1
            if conc is not None:
                leases.append(names[i].leases)
                left = conc - reply[at + 4]
                if best < 0 or left * best_limit < best_remaining * conc:
                    best_remaining, best_limit, best = left, conc, i * 4 + 2
            if budget is not None:
                left = budget - int(reply[at + 5])
                if best < 0 or left * best_limit < best_remaining * budget:
                    best_remaining, best_limit, best = left, budget, i * 4 + 3
        if leases:
            self._live[demand.lease_id] = tuple(leases)
        if best >= 0:
            i, which = divmod(best, 4)
            admission.quota = _figures_quota(scopes[i], which, reply, 1 + i * _FIGURES, now)
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
        call, keys_of = self._redis.call, self._keys_of
        sets = [
            call(b"SET", keys_of(name).of_month(month).spend, micros, b"NX", b"EX", SPEND_TTL_S)
            for name, micros in spend.items()
        ]
        try:
            await asyncio.gather(*sets)
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
        keys: list[bytes] = []  # packed fragments
        args: list[Arg] = [SPEND_TTL_S, len(settles)]
        keys_of, month_of_ = self._keys_of, self._months.of
        for admission, tokens, cost in settles:
            demand = admission.demand
            month = month_of_(demand.now)
            reserved_of = admission.reserved.get
            args += (demand.lease_id, admission.bucket, len(demand.scopes))
            for scope in demand.scopes:
                name = scope.name
                keys.append(keys_of(name).of_month(month).settle)
                reserved = reserved_of(name)
                delta = _NONE if reserved is None or tokens is None else tokens - reserved
                charge = cost != 0 and scope.budget_micros is not None
                args += (delta, cost if charge else _NONE)
        n = 3 * len(keys)  # each fragment: one scope's leases, tpm and spend keys
        keys.append(pack_args(args))
        try:
            await self._settle.run(self._settle.command(n, n + len(args), b"".join(keys)))
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
        replicas = f"{self.prefix}replicas"
        call = self._redis.call
        calls = [
            call(b"ZADD", replicas, now + HEARTBEAT_TTL_S, self.replica_id),
            call(b"ZREMRANGEBYSCORE", replicas, b"-inf", now),
            call(b"ZCOUNT", replicas, f"({now!r}", b"+inf"),
            call(b"EXPIRE", replicas, int(HEARTBEAT_TTL_S * 4)),
        ]
        expiry = now + LEASE_TTL_S
        for lease_id, keys in list(self._live.items()):
            for key in keys:
                calls.append(call(b"ZADD", key, b"XX", expiry, lease_id))
                calls.append(call(b"PEXPIRE", key, LEASES_TTL_MS))
        try:
            results = await asyncio.gather(*calls)  # the first failure; all are retrieved
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
            return await self._redis.ping()
        except _ERRORS:
            return False

    async def spent(self, name: str, month: str) -> int:
        return int(await self._redis.call(b"GET", self._keys_of(name).of_month(month).spend) or 0)

    async def in_flight(self, name: str, now: float) -> int:
        leases = self._keys_of(name).leases
        return int(await self._redis.call(b"ZCOUNT", leases, f"({now!r}", b"+inf"))

    async def start(self) -> None:
        """Redis may be down at start: the scripts load on first use then (NOSCRIPT)."""
        with contextlib.suppress(*_ERRORS):
            await asyncio.gather(self._admit.load(), self._settle.load())
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="redis-limiter")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        # Not `while True`: a cancellation that lands in a command must not be mistaken for
        # a failed send and swallowed; the flag ends the loop regardless.
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
        await self._redis.close()


def _figures_quota(scope: Scope, kind: int, reply: list[Any], at: int, now: float) -> Quota:
    """The quota of limit `kind` (an index into _KINDS) of the scope whose figures start at
    `reply[at]`."""
    count, text = _FIGURE_AT[kind]
    figures = 0 if count < 0 else reply[at + count], b"" if text < 0 else reply[at + text]
    return _quota(scope, _KINDS[kind], *figures, now)


def _quota(scope: Scope, kind: LimitKind, count: int, text: bytes | str, now: float) -> Quota:
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

"""The shared limiter: every replica admits against the same counters in Redis.

An admission is one Lua script (one round trip, atomic): it checks every limit of every
scope exactly as LocalLimiter does and takes from all of them only if all admit. Settles,
lease renewals, the replica heartbeat and spend seeding go through one background task, so
`settle` never blocks a response. The admission time travels as the 8 bytes of its double
and the script derives the other times from it with the same arithmetic, so windows are cut
at exactly the same instants as in local.py.

Every admission costs this process CPU, so the hot path is lean: resp.py's pipelined client
(not redis-py), each key's plan compiled once (key names, packed limits: only the time,
tokens and lease are packed per admission; formatting a float alone cost more than all of
that), and the tightest limit kept as figures, not a Quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

import structlog

from llmrelay.limits.base import (
    KINDS,
    LEASE_TTL_S,
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
    seconds_to_next_month,
)
from llmrelay.limits.errors import BackendUnavailable, LimitExceeded
from llmrelay.limits.redis_scripts import ADMIT, SETTLE
from llmrelay.limits.releases import Releases
from llmrelay.limits.replies import REPLY_FIGURES, admission_of, figures_of
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
RPM_TTL_MS: Final = (WINDOW_S + 1) * 1000
TPM_TTL_MS: Final = (TPM_BUCKETS + 1) * 1000
LEASES_TTL_MS: Final = int((LEASE_TTL_S + 10) * 1000)
SPEND_TTL_S: Final = 40 * 86400
#: A replica that misses this many seconds of heartbeats no longer counts for the share.
HEARTBEAT_TTL_S: Final = 15.0
RENEW_EVERY_S: Final = LEASE_TTL_S / 3
#: Settles sent per script call (one round trip for a burst of finished requests).
SETTLE_BATCH: Final = 64
CLOSE_DRAIN_S: Final = 2.0
#: Scopes whose key names are kept (more: the cache starts again, it only saves CPU).
KEYS_CACHED: Final = 100_000
_ERRORS: Final = (RespError, RespConnectionError)
_NONE: Final = b""  # a limit the scope does not have, or a settle figure with nothing to do

#: The ttls, packed once: the same in every admission.
_TTLS: Final = pack_args((RPM_TTL_MS, TPM_TTL_MS, LEASES_TTL_MS, SPEND_TTL_S))
#: The admission time travels as the 8 bytes of a double (see redis_scripts.ADMIT).
_pack_double = struct.Struct("<d").pack

#: A settle to send: the admission, the tokens used, the cost (a plain tuple: one per request).
_Settle = tuple[Admission, int | None, int]


class _Seed(NamedTuple):
    month: str
    spend: Mapping[str, int]


class _Keys:
    """One scope's key names and packed script arguments, built once for the scope (and
    month, and limits) instead of for every admission and settle."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.month, self.spend = prefix, "", ""
        self.rpm, self.tpm, self.leases = f"{prefix}rpm", f"{prefix}tpm", f"{prefix}leases"
        #: Budget holds: lease ids by expiry, and lease id -> micro-USD (redis_scripts).
        self.holds, self.held = f"{prefix}holds", f"{prefix}held"
        self.admit = self.settle = b""

    def of_month(self, month: str) -> _Keys:
        if month != self.month:
            self.month, self.spend = month, f"{self.prefix}spend:{month}"
            self.admit = pack_args(
                (self.rpm, self.tpm, self.leases, self.spend, self.holds, self.held)
            )
            self.settle = pack_args((self.leases, self.tpm, self.spend, self.holds, self.held))
        return self


class RedisProgram(Program):
    """A plan's scopes as this limiter sends them: key names, packed limits, the reply's
    figures to read (see Plan)."""

    __slots__ = (
        *("admit_keys", "argc", "figures", "holds", "keys", "leases", "month", "numkeys"),
        "tail",
    )

    def __init__(self, owner: RedisLimiter, scopes: tuple[Scope, ...]) -> None:
        super().__init__(owner, scopes, False)
        self.keys = tuple(owner.keys_of(s.name) for s in scopes)
        limits = [(s.rpm, s.tpm, s.concurrency, s.budget_micros) for s in scopes]
        #: The arguments after the per-admission ones: the ttls, each scope's limits.
        self.tail = _TTLS + b"".join(
            pack_args([_NONE if v is None else v for v in four]) for four in limits
        )
        self.numkeys = 6 * len(scopes)
        #: Keys and arguments of an admission: 5 of its own, 4 ttls, 4 limits per scope.
        self.argc = self.numkeys + 9 + 4 * len(scopes)
        self.figures = figures_of(scopes)  # see replies.Figures
        #: The leases keys a lease sits in (renewed while the request lives).
        self.leases = tuple(
            k.leases for k, s in zip(self.keys, scopes, strict=True) if s.concurrency
        )
        #: The holds keys of the budgets a hold sits in (renewed with the leases).
        self.holds = tuple(
            k.holds for k, s in zip(self.keys, scopes, strict=True) if s.budget_micros is not None
        )
        self.month = ""  # the month `admit_keys` name the spend keys of
        self.admit_keys = b""

    def of_month(self, month: str) -> bytes:
        """The packed key names of an admission in `month`."""
        if month != self.month:
            self.admit_keys = b"".join(k.of_month(month).admit for k in self.keys)
            self.month = month
        return self.admit_keys


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
        #: Lease ids of this process's admissions: the prefix makes them unique across
        #: replicas (they are rpm members too).
        self._lease_prefix = f"{secrets.token_hex(6)}:"
        self._work: deque[_Settle | _Seed] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._live: dict[str, tuple[str, ...]] = {}  # lease id -> leases keys it sits in
        self._releases = Releases()
        self._holding: dict[str, tuple[str, ...]] = {}  # lease id -> holds keys it sits in
        self._keys: dict[str, _Keys] = {}
        self._months = Months()
        self._replicas = 1
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def keys_of(self, name: str) -> _Keys:
        keys = self._keys.get(name)
        if keys is None:
            if len(self._keys) >= KEYS_CACHED:
                self._keys.clear()
            keys = self._keys[name] = _Keys(f"{self.prefix}{name}:")
        return keys

    async def admit(self, demand: Demand) -> Admission:
        return await self.admit_plan(
            Plan(demand.scopes), demand.tokens, demand.now, demand.lease_id
        )

    async def admit_plan(
        self, plan: Plan, tokens: int, now: float, lease: str | None = None, hold: int = 0
    ) -> Admission:
        # asked again when this process's own ended requests held the leases (releases.py)
        return await self._releases.admit(self._admit_once, plan, tokens, now, lease, hold)

    async def _admit_once(
        self, plan: Plan, tokens: int, now: float, lease: str | None, hold: int
    ) -> Admission:
        program = plan.shared
        if program is None or program.owner is not self:
            program = plan.shared = RedisProgram(self, plan.scopes)
        months = self._months
        month = months.name if months.start <= now < months.end else months.of(now)
        keys = program.admit_keys if month == program.month else program.of_month(month)
        if lease is None:  # ours: unique across replicas, and a fine rpm member too
            lease = member = f"{self._lease_prefix}{next(self._seq)}"
        else:  # the caller's: unique rpm members even if a lease id comes back
            member = f"{lease}:{next(self._seq)}"
        if not program.holds:
            hold = 0
        command = self._admit.command(
            program.numkeys,
            program.argc,
            keys + pack_args((_pack_double(now), tokens, lease, member, hold)) + program.tail,
        )
        try:
            try:
                reply: list[Any] = await self._redis.send(command)
            except RespError as refused:  # NOSCRIPT: Redis lost the script; else a bug
                if not str(refused).startswith("NOSCRIPT"):
                    raise
                await self._admit.load()
                reply = await self._redis.send(command)
        except _ERRORS as exc:
            raise BackendUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if reply[0] == 0:
            scope, kind = program.scopes[int(reply[1]) - 1], KINDS[int(reply[2]) - 1]
            quota = _quota(scope, kind, reply[3], reply[4], now)
            raise LimitExceeded(quota, quota.reset_s)
        if program.leases:
            self._live[lease] = program.leases
        if hold:
            self._holding[lease] = program.holds
        return admission_of(program, program.figures, reply, tokens, now, lease, hold, _reset)

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        if admission.settled:
            return
        admission.settled = True
        program = admission.program
        assert type(program) is RedisProgram  # made by this limiter
        if program.leases:
            self._live.pop(admission.lease, None)  # type: ignore[arg-type]  # always set
        if admission.held:
            self._holding.pop(admission.lease, None)  # type: ignore[arg-type]  # always set
        self._releases.queued += 1
        self._queue((admission, tokens, cost_micros))

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None:
        self._queue(_Seed(month, dict(spend)))

    def _queue(self, item: _Settle | _Seed) -> None:
        self._work.append(item)
        self._idle.clear()
        self._wake.set()

    async def seed_spend_now(self, month: str, spend: Mapping[str, int]) -> None:
        """NX: a replica starting later must not overwrite a counter that already holds
        spend settled since the database was read."""
        call, keys_of = self._redis.call, self.keys_of
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
            if isinstance(item, _Seed):
                seeds.append(item)
            else:
                settles.append(item)
        for seed in seeds:
            try:
                await self.seed_spend_now(seed.month, seed.spend)
            except BackendUnavailable as exc:
                log.warning("limits_seed_failed", month=seed.month, error=str(exc))
        if settles:
            try:
                await self._send_settles(settles)
            finally:
                self._releases.mark_sent(len(settles))

    async def _send_settles(self, settles: list[_Settle]) -> None:
        keys: list[bytes] = []  # packed fragments
        args: list[Arg] = [SPEND_TTL_S, len(settles)]
        month_of_ = self._months.of
        for admission, tokens, cost in settles:
            program = admission.program
            assert type(program) is RedisProgram
            now, asked = admission.now, admission.tokens
            month = month_of_(now)
            assert admission.lease is not None  # always, for Redis
            args += (admission.lease, int(now), len(program.scopes))
            for k, scope in zip(program.keys, program.scopes, strict=True):
                keys.append(k.of_month(month).settle)
                tpm = scope.tpm
                if tpm is None or tokens is None:
                    delta: Arg = _NONE
                else:  # the difference to what the admission reserved
                    delta = tokens - (asked if asked < tpm else tpm)
                charge = cost != 0 and scope.budget_micros is not None
                held = admission.held != 0 and scope.budget_micros is not None
                args += (delta, cost if charge else _NONE, 1 if held else _NONE)
        n = 5 * len(keys)  # each fragment: one scope's leases, tpm, spend, holds, held keys
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
            for admission, tokens, cost_micros in settles:
                self._on_settle_failed(admission, tokens, cost_micros)

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
        for lease_id, keys in list(self._holding.items()):
            for key in keys:  # the holds keys live as long as the spend: no PEXPIRE
                calls.append(call(b"ZADD", key, b"XX", expiry, lease_id))
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
        return int(await self._redis.call(b"GET", self.keys_of(name).of_month(month).spend) or 0)

    async def in_flight(self, name: str, now: float) -> int:
        leases = self.keys_of(name).leases
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
        left = [item for item in self._work if not isinstance(item, _Seed)]
        self._work.clear()
        if left:
            self._give_up(left, "limits_settles_dropped", "closing")
            self._releases.mark_sent(len(left))
        await self._redis.close()


def _reset(top: int, reply: list[Any], now: float) -> float:
    """Seconds until limit `top` (see Admission.top) recovers, from its scope's figures in
    an admission's reply: what _quota computes, without the Quota."""
    at, kind = 1 + (top >> 2) * REPLY_FIGURES, top & 3
    if kind == 0:
        text = reply[at + 1]
        return float(text) + WINDOW_S - now if text else float(WINDOW_S)
    if kind == 1:
        text = reply[at + 3]
        return int(text) + TPM_BUCKETS - now if text else float(WINDOW_S)
    return 1.0 if kind == 2 else seconds_to_next_month(now)


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

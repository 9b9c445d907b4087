"""The database limiter: replicas on one PostgreSQL database and no Redis admit against the
same counters (tables of migration 0027), so a limit is not multiplied by the replicas.

An admission is one call of the stored function `llmrelay_limits_admit`, atomic under
advisory locks on the request's scopes: it checks every limit of every scope as the Redis
script does and takes from all of them only if all admit. Admissions that arrive while a
call is in flight wait and go together in the next call (one round trip and one commit for
a burst, in arrival order), so the cost per request falls as the load rises; each is still
checked and taken on its own, so the limits are exact, with no tolerance. Settles, lease
renewals and the replica heartbeat go through a second connection on a background task,
as with Redis, so `settle` never blocks a response.

Differences from Redis (docs/limits.md): the rpm window is counted in one-second buckets
over the 61 seconds up to now's (as tpm is everywhere), so never more than the limit in
any 60 s, and a refused client may wait up to a second longer than with the exact log.
Commits are asynchronous (`synchronous_commit = off` on these connections): a database
crash may forget the last fraction of a second of counts, never the records or the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
import structlog
from sqlalchemy.engine import make_url

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
from llmrelay.limits.releases import Releases
from llmrelay.limits.replies import REPLY_FIGURES, admission_of, figures_of
from llmrelay.store.db import async_url

log = structlog.get_logger(__name__)

#: Admissions sent in one call at most (the rest wait for the next).
ADMIT_BATCH: Final = 256
SETTLE_BATCH: Final = 256
#: A replica that misses this many seconds of heartbeats no longer counts for the share.
HEARTBEAT_TTL_S: Final = 15.0
RENEW_EVERY_S: Final = LEASE_TTL_S / 3
CLOSE_DRAIN_S: Final = 2.0
CONNECT_TIMEOUT_S: Final = 5.0
_APPLICATION: Final = "llmrelay-limits"

_ADMIT_SQL: Final = "SELECT llmrelay_limits_admit($1::jsonb)::text"
_SETTLE_SQL: Final = "SELECT llmrelay_limits_settle($1::jsonb)"
_SEED_SQL: Final = """
INSERT INTO limit_spend AS p (scope, month, spent_micros)
SELECT s, $1, m FROM unnest($2::text[], $3::bigint[]) AS u(s, m)
ON CONFLICT (scope, month) DO UPDATE
  SET spent_micros = greatest(p.spent_micros, excluded.spent_micros)
"""
_RENEW_SQL: Final = """
UPDATE limit_leases AS l SET expires_at = $3
FROM unnest($1::text[], $2::text[]) AS u(s, l) WHERE l.scope = u.s AND l.lease = u.l
"""
_BEAT_SQL: Final = """
INSERT INTO limit_replicas (replica, expires_at) VALUES ($1, $2)
ON CONFLICT (replica) DO UPDATE SET expires_at = excluded.expires_at
"""
_COUNT_SQL: Final = "SELECT count(*) FROM limit_replicas WHERE expires_at > $1"
_SWEEP_SQL: Final = "DELETE FROM limit_replicas WHERE expires_at <= $1"

#: A settle to send: the admission, the tokens used, the cost.
_Settle = tuple[Admission, int | None, int]


def dsn_of(database_url: str) -> str:
    """asyncpg's DSN for LLMRELAY_DATABASE_URL (which may name SQLAlchemy's driver)."""
    return (
        make_url(async_url(database_url))
        .set(drivername="postgresql")
        .render_as_string(hide_password=False)
    )


class DatabaseProgram(Program):
    """A plan's scopes as the stored function takes them, encoded once."""

    __slots__ = ("figures", "leased", "scopes_json")

    def __init__(self, owner: DatabaseLimiter, scopes: tuple[Scope, ...]) -> None:
        super().__init__(owner, scopes, False)
        rows = [[s.name, s.rpm, s.tpm, s.concurrency, s.budget_micros] for s in scopes]
        self.scopes_json = orjson.Fragment(orjson.dumps(rows))
        self.figures = figures_of(scopes)  # see replies.Figures
        #: The scopes a lease sits in (renewed while the request lives).
        self.leased = tuple(
            s.name for s in scopes if s.concurrency is not None or s.budget_micros is not None
        )


class _Pending:
    """An admission waiting for its call: what goes to the database, and its answer."""

    __slots__ = ("future", "program", "request")

    def __init__(self, program: DatabaseProgram, request: dict[str, Any], future: Any) -> None:
        self.program, self.request, self.future = program, request, future


class DatabaseLimiter:
    """Limits shared by every replica on the same PostgreSQL database."""

    def __init__(
        self,
        database_url: str,
        *,
        replica_id: str | None = None,
        on_settle_failed: Callable[[Admission, int | None, int], None] | None = None,
        timeout_s: float = 2.0,
    ) -> None:
        self._dsn = dsn_of(database_url)
        self.timeout_s = timeout_s
        self.replica_id = replica_id or uuid.uuid4().hex
        self._on_settle_failed = on_settle_failed
        self._seq = itertools.count()
        self._lease_prefix = f"{secrets.token_hex(6)}:"
        self._months = Months()
        self._pending: deque[_Pending] = deque()
        self._admit_wake = asyncio.Event()
        self._work: deque[_Settle] = deque()
        self._seeds: list[tuple[str, dict[str, int]]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._live: dict[str, tuple[str, ...]] = {}  # lease id -> scopes it sits in
        self._releases = Releases()
        self._replicas = 1
        self._closing = False
        self._admit_conn: Any = None
        self._settle_conn: Any = None
        self._admitter: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None

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
        program = plan.database
        if program is None or program.owner is not self:
            program = plan.database = DatabaseProgram(self, plan.scopes)
        months = self._months
        month = months.name if months.start <= now < months.end else months.of(now)
        if lease is None:
            lease = f"{self._lease_prefix}{next(self._seq)}"
        request = {
            "n": now,
            "t": tokens,
            "l": lease,
            "e": now + LEASE_TTL_S,
            "h": hold,
            "m": month,
            "s": program.scopes_json,
        }
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(program, request, future))
        self._admit_wake.set()
        if self._admitter is None or self._admitter.done():
            self._admitter = asyncio.create_task(self._admit_loop(), name="db-limiter-admit")
        reply: list[Any] = await future
        if reply[0] == 0:
            scope, kind = program.scopes[int(reply[1]) - 1], KINDS[int(reply[2]) - 1]
            quota = _quota(scope, kind, reply[3], reply[4], now)
            raise LimitExceeded(quota, quota.reset_s)
        if program.leased:
            self._live[lease] = program.leased
        return admission_of(program, program.figures, reply, tokens, now, lease, hold, _reset)

    async def _admit_loop(self) -> None:
        """Send what waits, one call at a time; what arrives meanwhile goes in the next."""
        while not self._closing:
            if not self._pending:
                self._admit_wake.clear()
                await self._admit_wake.wait()
                continue
            batch: list[_Pending] = []
            while self._pending and len(batch) < ADMIT_BATCH:
                batch.append(self._pending.popleft())
            try:
                replies = await self._admit_call(batch)
            except asyncio.CancelledError:
                _fail(batch, BackendUnavailable("the limiter is closing"))
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: the wrapper falls back
                _fail(batch, BackendUnavailable(f"{type(exc).__name__}: {exc}"))
                continue
            for pending, reply in zip(batch, replies, strict=True):
                if not pending.future.done():
                    pending.future.set_result(reply)

    async def _admit_call(self, batch: list[_Pending]) -> list[Any]:
        conn = self._admit_conn
        if conn is None or conn.is_closed():
            conn = self._admit_conn = await self._connect()
        try:
            text = await conn.fetchval(
                _ADMIT_SQL,
                orjson.dumps([p.request for p in batch]).decode(),
                timeout=self.timeout_s,
            )
        except BaseException:
            self._admit_conn = None
            conn.terminate()  # its reply could still come: never reuse it
            raise
        replies: list[Any] = orjson.loads(text)
        return replies

    async def _connect(self) -> Any:
        import asyncpg

        return await asyncpg.connect(
            self._dsn,
            timeout=min(CONNECT_TIMEOUT_S, max(self.timeout_s, 0.5)),
            server_settings={"application_name": _APPLICATION, "synchronous_commit": "off"},
        )

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        if admission.settled:
            return
        admission.settled = True
        program = admission.program
        assert type(program) is DatabaseProgram  # made by this limiter
        if program.leased:
            self._live.pop(admission.lease, None)  # type: ignore[arg-type]  # always set
        tpm_or_cost = program.reconciles or (
            cost_micros and any(s.budget_micros is not None for s in program.scopes)
        )
        if program.leased or tpm_or_cost:
            self._work.append((admission, tokens, cost_micros))
            self._releases.queued += 1
            self._idle.clear()
            self._wake.set()

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None:
        """Never lower than what the table holds (settles since the records were read)."""
        if spend:
            self._seeds.append((month, dict(spend)))
            self._idle.clear()
            self._wake.set()

    async def seed_spend_now(self, month: str, spend: Mapping[str, int]) -> None:
        conn = await self._settle_connection()
        names = list(spend)
        await conn.execute(
            _SEED_SQL, month, names, [spend[n] for n in names], timeout=self.timeout_s * 5
        )

    async def _settle_connection(self) -> Any:
        conn = self._settle_conn
        if conn is None or conn.is_closed():
            conn = self._settle_conn = await self._connect()
        return conn

    async def flush(self) -> None:
        """Wait until every queued settle has been sent (or given up on)."""
        if self._task is None or self._task.done():
            await self._send_some()
            self._idle.set()
        await self._idle.wait()

    async def _send_some(self) -> None:
        seeds = self._seeds
        while seeds:
            month, spend = seeds.pop(0)
            try:
                await self.seed_spend_now(month, spend)
            except Exception as exc:  # noqa: BLE001 - the next start seeds again
                self._drop_settle_conn()
                log.warning("limits_seed_failed", month=month, error=repr(exc))
        while self._work:
            settles: list[_Settle] = []
            while self._work and len(settles) < SETTLE_BATCH:
                settles.append(self._work.popleft())
            try:
                await self._send_settles(settles)
            finally:
                self._releases.mark_sent(len(settles))

    async def _send_settles(self, settles: list[_Settle]) -> None:
        batch: list[Any] = []
        month_of_ = self._months.of
        for admission, tokens, cost in settles:
            program = admission.program
            asked = admission.tokens
            scopes: list[Any] = []
            for scope in program.scopes:
                tpm = scope.tpm
                delta = None
                if tpm is not None and tokens is not None:
                    delta = tokens - (asked if asked < tpm else tpm)
                charge = cost if cost and scope.budget_micros is not None else None
                scopes.append([scope.name, delta, charge])
            batch.append([admission.lease, int(admission.now), month_of_(admission.now), scopes])
        try:
            conn = await self._settle_connection()
            await conn.execute(_SETTLE_SQL, orjson.dumps(batch).decode(), timeout=self.timeout_s)
        except asyncio.CancelledError:
            self._give_up(settles, "limits_settle_failed", "cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - the database is away: kept locally
            self._drop_settle_conn()
            self._give_up(settles, "limits_settle_failed", repr(exc))

    def _drop_settle_conn(self) -> None:
        conn, self._settle_conn = self._settle_conn, None
        if conn is not None:
            conn.terminate()

    def _give_up(self, settles: list[_Settle], event: str, error: str) -> None:
        """The wrapper keeps the spend locally; the leases lapse in the table by themselves."""
        log.warning(event, settles=len(settles), error=error)
        if self._on_settle_failed is not None:
            for admission, tokens, cost_micros in settles:
                self._on_settle_failed(admission, tokens, cost_micros)

    async def _tick(self) -> None:
        """Renew this process's live leases and beat the heart."""
        now = time.time()
        try:
            conn = await self._settle_connection()
            async with conn.transaction():
                await conn.execute(_BEAT_SQL, self.replica_id, now + HEARTBEAT_TTL_S)
                await conn.execute(_SWEEP_SQL, now - HEARTBEAT_TTL_S)
                count = await conn.fetchval(_COUNT_SQL, now)
                if self._live:
                    scopes: list[str] = []
                    leases: list[str] = []
                    for lease_id, names in list(self._live.items()):
                        for name in names:
                            scopes.append(name)
                            leases.append(lease_id)
                    await conn.execute(_RENEW_SQL, scopes, leases, now + LEASE_TTL_S)
        except Exception as exc:  # noqa: BLE001 - tried again next tick
            self._drop_settle_conn()
            if not self._closing:
                log.warning("limits_renew_failed", leases=len(self._live), error=repr(exc))
            return
        self._replicas = max(1, int(count))

    def replicas(self) -> int:
        """Replicas alive at the last heartbeat (this one included): the fail-open share."""
        return self._replicas

    async def ping(self) -> bool:
        try:
            conn = await self._settle_connection()
            await conn.fetchval("SELECT 1", timeout=self.timeout_s)
        except Exception:  # noqa: BLE001 - any failure: not reachable
            self._drop_settle_conn()
            return False
        return True

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="db-limiter")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        while not self._closing:
            delay = next_tick - loop.time()
            if not self._work and not self._seeds and delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
            try:
                if self._work or self._seeds:
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
        self._admit_wake.set()
        for running in (task, self._admitter):
            if running is not None:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        _fail(list(self._pending), BackendUnavailable("the limiter is closing"))
        self._pending.clear()
        left = list(self._work)
        self._work.clear()
        if left:
            self._give_up(left, "limits_settles_dropped", "closing")
            self._releases.mark_sent(len(left))
        for conn in (self._admit_conn, self._settle_conn):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 1.0)
        self._admit_conn = self._settle_conn = None


def _fail(batch: list[_Pending], error: Exception) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(error)


def _reset(top: int, reply: list[Any], now: float) -> float:
    """Seconds until limit `top` recovers, from its scope's figures in an admission's reply."""
    at, kind = 1 + (top >> 2) * REPLY_FIGURES, top & 3
    if kind == 0:
        second = reply[at + 1]
        return second + TPM_BUCKETS - now if second is not None else float(WINDOW_S)
    if kind == 1:
        second = reply[at + 3]
        return second + TPM_BUCKETS - now if second is not None else float(WINDOW_S)
    return 1.0 if kind == 2 else seconds_to_next_month(now)


def _quota(scope: Scope, kind: LimitKind, count: Any, figure: Any, now: float) -> Quota:
    """A refusal's figures, as LocalLimiter reports them (rpm resets with its bucket)."""
    limit = scope.limit(kind)
    assert limit is not None
    if kind is LimitKind.RPM or kind is LimitKind.TPM:
        reset = figure + TPM_BUCKETS - now if figure is not None else float(WINDOW_S)
    elif kind is LimitKind.CONCURRENCY:
        reset = 1.0
    else:
        count, reset = int(figure), seconds_to_next_month(now)
    return Quota(kind, scope.kind, limit, limit - int(count), reset)

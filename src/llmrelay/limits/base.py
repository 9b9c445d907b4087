"""What every limiter does, and the words they share.

A request is admitted only if every limit of every scope (its key, then its project) admits
it, and then takes from all of them at once; a refused request takes nothing. The limits:

- rpm: requests in any 60 s interval, never more than the limit (an exact sliding log of
  admission times);
- tpm: tokens in 61 one-second buckets (the current second and the 60 before it, so a
  conservative cover of any 60 s interval). Admission reserves an estimate; `settle`
  charges or refunds the difference to the bucket the reservation went to once the real
  usage is known (a bucket that already left the window is past caring);
- concurrency: leases, one per request in flight, each with an expiry renewed while the
  request lives (a crashed replica's leases run out instead of blocking forever);
- budget: the month's spend (UTC calendar month, micro-USD) plus what the requests in
  flight hold must be below the budget. Admission holds the request's most possible cost
  (the prepaid reservation's estimate, `hold`); `settle` lets the hold go and adds the real
  cost, so concurrent requests cannot all pass on a budget that covers a few: the spend
  overshoots by at most the hold of the request admitted last (docs/limits.md).

Implementations: local.py (in process), redis.py (shared by replicas, one round trip per
admission) and postgres.py (shared through PostgreSQL when there is no Redis, admissions
batched per round trip); resilient.py chooses between a shared one and local.py when the
shared store fails.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from llmrelay.limits.local import LocalProgram
    from llmrelay.limits.postgres import DatabaseProgram
    from llmrelay.limits.redis import RedisProgram

WINDOW_S: Final = 60
#: tpm buckets: the current second and the 60 before it.
TPM_BUCKETS: Final = WINDOW_S + 1
#: A concurrency lease lives this long unless renewed (renewed every third of it).
LEASE_TTL_S: Final = 30.0


class LimitKind(StrEnum):
    RPM = "rpm"
    TPM = "tpm"
    CONCURRENCY = "concurrency"
    BUDGET = "budget"


def floor_share(quota: int, share: int) -> int:
    """One process's part of a quota divided among `share` processes: the floor of the
    division, at least 1 (a quota that does not divide loses its remainder, never goes
    over). The limits' scopes and the provider resources' buckets divide the same way."""
    return quota if share <= 1 else max(1, quota // share)


class ScopeKind(StrEnum):
    KEY = "key"
    PROJECT = "project"


@dataclass(frozen=True, slots=True)
class Scope:
    """One holder of limits (a key or a project) and its limits (None: no such limit)."""

    kind: ScopeKind
    id: str
    rpm: int | None = None
    tpm: int | None = None
    concurrency: int | None = None
    budget_micros: int | None = None
    #: Stable across replicas: `key:ID` or `project:ID` (computed once: it keys every counter).
    name: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.kind.value}:{self.id}")

    def limit(self, kind: LimitKind) -> int | None:
        if kind is LimitKind.RPM:
            return self.rpm
        if kind is LimitKind.TPM:
            return self.tpm
        if kind is LimitKind.CONCURRENCY:
            return self.concurrency
        return self.budget_micros

    def shared(self, share: int) -> Scope:
        """This scope's limits divided among `share` processes (each gets a floor share,
        at least 1): what a replica enforces alone when the limits cannot be shared."""
        if share <= 1:
            return self

        def part(value: int | None) -> int | None:
            return None if value is None else floor_share(value, share)

        return Scope(
            self.kind,
            self.id,
            part(self.rpm),
            part(self.tpm),
            part(self.concurrency),
            part(self.budget_micros),
        )


@dataclass(slots=True)
class Demand:
    """What one request asks of its scopes."""

    scopes: tuple[Scope, ...]
    #: The concurrency lease's id (the request id: unique, and in the logs).
    lease_id: str
    #: The tpm estimate; each scope reserves min(tokens, its tpm), so a request larger than
    #: a whole minute's allowance is admitted into an empty window rather than never.
    tokens: int
    #: Wall clock (seconds since the epoch): windows and months are shared across replicas.
    now: float


@dataclass(slots=True)
class Quota:
    """One limit's figures, for the X-RateLimit-* headers."""

    kind: LimitKind
    scope: ScopeKind
    limit: int
    remaining: int
    #: Seconds until the figure recovers (the oldest request leaves the window, a lease
    #: frees, the month turns).
    reset_s: float

    def headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(max(0, self.remaining)),
            "X-RateLimit-Reset": str(max(1, math.ceil(self.reset_s))),
        }

    def header_pairs(self) -> list[tuple[bytes, bytes]]:
        """The same headers as ASGI pairs (a successful answer's, built on the hot path)."""
        return [
            (b"x-ratelimit-limit", b"%d" % self.limit),
            (b"x-ratelimit-remaining", b"%d" % max(0, self.remaining)),
            (b"x-ratelimit-reset", b"%d" % max(1, math.ceil(self.reset_s))),
        ]


class Plan:
    """The limits of one key (its own, then its project's), made once per key snapshot
    (scopes.py): what the request path must know without looking at every limit — whether
    a token estimate is wanted, a lease, the month — and each limiter's compiled form,
    filled on its first admission (a reload makes new plans, so never stale)."""

    __slots__ = ("budget", "concurrency", "database", "local", "scopes", "shared", "tpm")

    def __init__(self, scopes: tuple[Scope, ...]) -> None:
        self.scopes = scopes
        self.tpm = any(s.tpm is not None for s in scopes)
        self.concurrency = any(s.concurrency is not None for s in scopes)
        self.budget = any(s.budget_micros is not None for s in scopes)
        #: LocalLimiter's program, RedisLimiter's and DatabaseLimiter's (see `Program`).
        self.local: LocalProgram | None = None
        self.shared: RedisProgram | None = None
        self.database: DatabaseProgram | None = None


class Program:
    """A plan as one limiter enforces it (the in-process fallback: its share of each limit):
    what its admissions and settles use instead of examining each scope again. Limiters
    subclass it with their own state (counters, key names)."""

    __slots__ = ("degraded", "limit_bytes", "owner", "reconciles", "scopes")

    def __init__(self, owner: Limiter, scopes: tuple[Scope, ...], degraded: bool) -> None:
        #: The limiter whose admissions these are: the one that settles them.
        self.owner = owner
        #: The scopes with the limits enforced (divided by a share).
        self.scopes = scopes
        #: Whether a settle has tpm to reconcile (the used tokens are wanted).
        self.reconciles = any(s.tpm is not None for s in scopes)
        #: Admissions of a replica's local fallback while Redis is unreachable.
        self.degraded = degraded
        #: X-RateLimit-Limit of each limit, at scope index * 4 + kind index (see `KINDS`).
        self.limit_bytes = tuple(
            b"" if v is None else b"%d" % v
            for s in scopes
            for v in (s.rpm, s.tpm, s.concurrency, s.budget_micros)
        )


#: The kinds in the order each scope's limits are checked (`Admission.top` indexes it).
KINDS: Final = (LimitKind.RPM, LimitKind.TPM, LimitKind.CONCURRENCY, LimitKind.BUDGET)
#: X-RateLimit-Reset values up to a little over a minute (rpm and tpm), formatted once.
_RESET_MAX: Final = TPM_BUCKETS + 1
_RESETS: Final = tuple(b"%d" % max(1, n) for n in range(_RESET_MAX + 1))
_LIMIT: Final = b"x-ratelimit-limit"
_REMAINING: Final = b"x-ratelimit-remaining"
_RESET: Final = b"x-ratelimit-reset"


class Admission:
    """What an admission took, handed back to `settle` by the limiter that took it
    (`program.owner`), and the tightest limit's figures after it (a successful answer's
    headers). One is made per limited request, so it is light: figures, not objects
    (`quota` and `reserved` are derived on demand), and no __init__: the limiters set every
    field themselves (a Python __init__ call costs twice the sets)."""

    __slots__ = ("held", "lease", "left", "now", "program", "reset", "settled", "tokens", "top")

    program: Program
    #: The tpm estimate (each scope with tpm reserved min(tokens, its tpm)).
    tokens: int
    #: When it was admitted (wall clock): its tpm bucket and its month.
    now: float
    #: The concurrency lease (None: no concurrency limit, and not Redis).
    lease: str | int | None
    #: What it holds of each budget until settled (micro-USD; 0: nothing).
    held: int
    #: The tightest limit: scope index * 4 + kind index (-1: none), what is left of it, and
    #: the seconds until it recovers.
    top: int
    left: int
    reset: float
    settled: bool

    @property
    def limiter(self) -> Limiter:
        return self.program.owner

    @property
    def degraded(self) -> bool:
        """Taken by a replica's local fallback while Redis was unreachable."""
        return self.program.degraded

    @property
    def bucket(self) -> int:
        """The tpm bucket (the second) the reservation went to."""
        return int(self.now)

    @property
    def reserved(self) -> dict[str, int]:
        """Scope name -> tokens reserved for tpm (only scopes with a tpm limit)."""
        tokens = self.tokens
        return {
            s.name: tokens if tokens < s.tpm else s.tpm
            for s in self.program.scopes
            if s.tpm is not None
        }

    @property
    def quota(self) -> Quota | None:
        """The tightest limit after this admission (None: no limit applied)."""
        top = self.top
        if top < 0:
            return None
        scope = self.program.scopes[top >> 2]
        kind = KINDS[top & 3]
        limit = scope.limit(kind)
        assert limit is not None
        return Quota(kind, scope.kind, limit, self.left, self.reset)

    def header_pairs(self) -> tuple[tuple[bytes, bytes], ...]:
        """The X-RateLimit-* headers of a successful answer, as ASGI pairs (Quota.headers'
        figures, formatted without building the Quota)."""
        top = self.top
        if top < 0:
            return ()
        left, reset = self.left, self.reset
        seconds = int(reset)
        if seconds < reset:
            seconds += 1  # math.ceil, without the call
        return (
            (_LIMIT, self.program.limit_bytes[top]),
            (_REMAINING, b"%d" % left if left > 0 else b"0"),
            (_RESET, _RESETS[seconds] if 0 <= seconds <= _RESET_MAX else b"%d" % max(1, seconds)),
        )


class Limiter(Protocol):
    async def admit(self, demand: Demand) -> Admission:
        """Take from every limit of `demand.scopes`, or raise LimitExceeded (taking nothing)."""

    async def admit_plan(
        self, plan: Plan, tokens: int, now: float, lease: str | None = None, hold: int = 0
    ) -> Admission:
        """The same for the request path: a key's compiled plan, the tpm estimate (unused
        without tpm), the wall clock; the limiter makes a lease id when it needs one. `hold`:
        the request's most possible cost, held from each budget until it settles."""

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        """The request ended: free its lease, reconcile its tpm reservation with `tokens`
        (None: usage unknown, the estimate stands) and add its cost to the month's spend.
        Never blocks (a shared limiter sends it in the background)."""

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None:
        """The month's recorded spend per scope name, from the database at start."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Months:
    """The current UTC month and its bounds, recomputed only when a time falls outside them
    (formatting a date costs microseconds; budgets ask for the month on every request)."""

    __slots__ = ("end", "name", "start")

    def __init__(self) -> None:
        self.name, self.start, self.end = "", 0.0, 0.0

    def of(self, now: float) -> str:
        if self.start <= now < self.end:
            return self.name
        start = month_start(now)
        return self._set(month_of(now), start) if now >= self.start else month_of(now)

    def _set(self, name: str, start: float) -> str:
        self.name, self.start = name, start
        self.end = start + seconds_to_next_month(start)
        return name


def month_of(now: float) -> str:
    """The UTC calendar month of a wall-clock time: budgets reset when it changes."""
    return time.strftime("%Y-%m", time.gmtime(now))


def month_start(now: float) -> float:
    moment = datetime.fromtimestamp(now, UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp()


def seconds_to_next_month(now: float) -> float:
    moment = datetime.fromtimestamp(now, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp() - now

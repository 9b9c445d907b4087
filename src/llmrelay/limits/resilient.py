"""The shared limiter (Redis, or PostgreSQL without Redis) while it answers; the operator's
policy while it does not.

`fail_open` (the default) keeps serving: each replica admits alone with its share of every
limit (the limit divided by the replicas the shared store last saw alive), marks its answers
`X-RateLimit-Degraded: true`, logs the transition once and counts it in /metrics.
`fail_closed` answers 503 instead. A probe pings Redis every second while it is away and
switches back by itself; the month's spend is then seeded again (see app.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Protocol

import structlog

from llmrelay.limits.base import Admission, Demand, Plan
from llmrelay.limits.errors import BackendUnavailable, LimitExceeded, LimitsUnavailable
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.redis import RedisLimiter
from llmrelay.observability.metrics import Metrics
from llmrelay.settings import RedisFailurePolicy

log = structlog.get_logger(__name__)

PROBE_S: Final = 1.0

#: What a shared limiter calls with the settles it could not deliver.
SettleFailed = Callable[[Admission, "int | None", int], None]


class Shared(Protocol):
    """What this wrapper needs of a shared limiter (RedisLimiter, DatabaseLimiter)."""

    async def admit_plan(
        self, plan: Plan, tokens: int, now: float, lease: str | None = None, hold: int = 0
    ) -> Admission: ...

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None: ...

    def replicas(self) -> int: ...

    async def ping(self) -> bool: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class ResilientLimiter:
    def __init__(
        self,
        url: str | None,
        policy: RedisFailurePolicy,
        metrics: Metrics,
        *,
        on_recovered: Callable[[], Awaitable[None]] | None = None,
        shared: Callable[[SettleFailed], Shared] | None = None,
        store: str = "redis",
    ) -> None:
        """`url`: Redis's; or `shared` makes the shared limiter (given what it calls with
        settles it could not deliver) and `store` names it in logs and errors."""
        self.policy = policy
        self._metrics = metrics
        self._local = LocalLimiter(degraded=True)
        self._store = store
        if shared is not None:
            self._shared: Shared = shared(self._settle_failed)
        else:
            assert url is not None
            self._shared = RedisLimiter(url, on_settle_failed=self._settle_failed)
        self._on_recovered = on_recovered
        self._probe: asyncio.Task[None] | None = None
        self.degraded = False

    async def admit(self, demand: Demand) -> Admission:
        plan = Plan(demand.scopes)
        return await self.admit_plan(plan, demand.tokens, demand.now, demand.lease_id)

    async def admit_plan(
        self, plan: Plan, tokens: int, now: float, lease: str | None = None, hold: int = 0
    ) -> Admission:
        if not self.degraded:
            try:
                return await self._shared.admit_plan(plan, tokens, now, lease, hold)
            except BackendUnavailable:
                self._lost()
        if self.policy is RedisFailurePolicy.FAIL_CLOSED:
            raise LimitsUnavailable(
                f"limits cannot be checked: the shared limiter ({self._store}) is unreachable",
                headers={"Retry-After": "1"},
            )
        self._local.share = self._shared.replicas()
        # Raises LimitExceeded (counted by the caller); its admissions say `degraded`.
        admission = self._local.take(plan, tokens, now, lease, hold)
        self._metrics.limits_degraded_admissions.inc()
        return admission

    def replicas(self) -> int:
        """Replicas alive at the shared store's last heartbeat (this one included)."""
        return self._shared.replicas()

    def settle(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        """Back to whichever limiter took it."""
        admission.program.owner.settle(admission, tokens, cost_micros)

    def seed_spend(self, month: str, spend: Mapping[str, int]) -> None:
        self._local.seed_spend(month, spend)
        self._shared.seed_spend(month, spend)

    def _settle_failed(self, admission: Admission, tokens: int | None, cost_micros: int) -> None:
        """The shared store went away between admission and settle: the lease runs out there
        by itself; the spend is kept locally so the fallback does not overspend."""
        if cost_micros:
            for scope in admission.program.scopes:
                if scope.budget_micros is not None:
                    self._local.add_spend(scope.name, cost_micros, admission.now)

    def _lost(self) -> None:
        if self.degraded:
            return
        self.degraded = True
        self._metrics.limits_degraded.set(1)
        self._metrics.limits_degraded_transitions.labels("degraded").inc()
        log.warning(f"limits_{self._store}_unreachable", policy=self.policy.value)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._wait_for_redis())

    async def _wait_for_redis(self) -> None:
        while True:
            await asyncio.sleep(PROBE_S)
            if await self._shared.ping():
                break
        if self._on_recovered is not None:
            with contextlib.suppress(Exception):
                await self._on_recovered()
        self.degraded = False
        self._metrics.limits_degraded.set(0)
        self._metrics.limits_degraded_transitions.labels("shared").inc()
        log.info(f"limits_{self._store}_recovered")

    async def start(self) -> None:
        self._metrics.watch(self._metrics.limits_replicas, self._shared.replicas)
        await self._shared.start()
        if not await self._shared.ping():
            self._lost()

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        await self._shared.close()


__all__ = ["LimitExceeded", "ResilientLimiter"]

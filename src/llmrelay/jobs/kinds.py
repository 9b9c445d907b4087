"""What a kind of job is (`JobKind`), what its run receives (`JobContext`), and how it says
that an attempt failed (`RetryLater`, `GiveUp`) or that it wants to run again later without
failing (`RunAgainAt`).

A job's `run` returns the job's result (a JSON object, or None); the runner writes it. The
result can also be sealed (`JobContext.seal_result`): a model's answer never sits in the
database in the clear. Every write the run makes about its job goes through the context, which
fences it with the claim's epoch.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import queue
from llmrelay.jobs.queue import ClaimedJob
from llmrelay.store.crypto import Sealer


class RetryLater(Exception):
    """This attempt failed and another may succeed: queued again after `delay_s` (None: the
    kind's backoff) while attempts are left."""

    def __init__(self, message: str, delay_s: float | None = None) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class GiveUp(Exception):
    """The job cannot succeed (bad input, a refusal that will not change): failed at once,
    with `result` kept for whoever asks about it."""

    def __init__(self, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result


class RunAgainAt(Exception):
    """Not a failure: the job is queued again at `at` (Unix time) without spending an
    attempt (a probe's next round; a limit that resets then)."""

    def __init__(self, at: float) -> None:
        super().__init__(f"run again at {at}")
        self.at = at


def exponential_backoff(base_s: float = 5.0, cap_s: float = 600.0) -> Callable[[int], float]:
    """Delay before attempt n+1 after n failed: base * 2^(n-1), capped, with full jitter in
    its upper half (so workers retrying together spread out)."""

    def delay(failed_attempts: int) -> float:
        ceiling = min(cap_s, base_s * 2 ** max(0, failed_attempts - 1))
        return float(ceiling / 2 + random.random() * ceiling / 2)

    return delay


def fixed_schedule(delays_s: Sequence[float]) -> Callable[[int], float]:
    """Delays from a list (the last repeats): a probe's 5, 10, 30, 60 minutes."""

    def delay(failed_attempts: int) -> float:
        return float(delays_s[min(len(delays_s), max(1, failed_attempts)) - 1])

    return delay


@dataclass(frozen=True, slots=True)
class JobKind:
    name: str
    run: Callable[[JobContext], Awaitable[dict[str, Any] | None]]
    max_attempts: int = 5
    backoff: Callable[[int], float] = field(default_factory=exponential_backoff)
    #: Free the dedupe key when the job ends (one live job per key); False keeps it (one job
    #: per periodic slot, ever).
    release_dedupe: bool = True
    #: A finished job of this kind is deleted this long after it ended (None: the runner's
    #: default, LLMRELAY_JOBS_KEEP_FINISHED_S).
    keep_finished_s: float | None = None
    #: The expiry the job was queued with stands when it ends, however long it ran (a
    #: background response lives its TTL from submission): `keep_finished_s` is not applied.
    keep_expiry: bool = False
    #: An attempt running longer than this is cancelled and counted as failed.
    timeout_s: float | None = 600.0


class JobContext:
    """One claimed attempt of a job, as its run sees it."""

    def __init__(
        self,
        job: ClaimedJob,
        engine: AsyncEngine,
        sealer: Sealer | None,
        services: Any,
        lease_s: float,
    ) -> None:
        self.job = job
        self.engine = engine
        self.sealer = sealer
        #: What the process offers jobs (jobs.runner.Services): the data plane, settings.
        self.services = services
        self.lease_s = lease_s
        self.sealed_result: str | None = None

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload

    @property
    def checkpoint(self) -> dict[str, Any] | None:
        return self.job.checkpoint

    @property
    def is_last_attempt(self) -> bool:
        return self.job.attempts >= self.job.max_attempts

    def secret_payload(self) -> Any:
        """The sealed part of the payload, opened (None when there is none)."""
        if self.job.payload_sealed is None:
            return None
        return orjson.loads(self._sealer().open(self.job.payload_sealed, context=self.job.id))

    def seal_result(self, value: Any) -> None:
        """Keep `value` as the job's sealed result (written with the job's end)."""
        self.sealed_result = self._sealer().seal(orjson.dumps(value), context=self.job.id)

    async def save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Progress the next attempt starts from; raises queue.LeaseLost when the job is no
        longer this worker's (stop at once: another worker has it)."""
        await queue.save_checkpoint(
            self.engine, self.job.id, self.job.epoch, checkpoint, now=time.time()
        )
        self.job = _with_checkpoint(self.job, checkpoint)

    def _sealer(self) -> Sealer:
        if self.sealer is None:
            raise GiveUp("this worker has no secret key to open the job's sealed payload")
        return self.sealer


def _with_checkpoint(job: ClaimedJob, checkpoint: dict[str, Any]) -> ClaimedJob:
    return replace(job, checkpoint=checkpoint)

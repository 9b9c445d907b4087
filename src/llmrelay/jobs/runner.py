"""The job runner: claims due jobs, runs each in its own task under a lease it keeps alive
with heartbeats, and writes how each attempt ended. One per process: `serve` starts one in
process (unless LLMRELAY_JOBS_IN_PROCESS=false), `llmrelay worker` runs one alone; any number
of them share one database, since claims are exclusive (jobs/queue.py).

Each round it also queues the periodic jobs of the current time slot (one per slot across all
runners, by the slot's dedupe key), and puts back the jobs whose lease ran out: their worker
died, and another attempt (or a clear failure) follows instead of a job stuck forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import queue
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind, RetryLater, RunAgainAt
from llmrelay.jobs.queue import ClaimedJob, LeaseLost
from llmrelay.observability.metrics import Metrics
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import background_begin
from llmrelay.store.models_jobs import QUEUED

log = structlog.get_logger(__name__)

#: Finished jobs are kept this long unless their kind says otherwise (a week).
DEFAULT_KEEP_FINISHED_S = 7 * 86_400.0
#: run_until_idle: a job due within this long of "now" still counts as due.
_IDLE_GRACE_S = 0.05


@dataclass(frozen=True, slots=True)
class Schedule:
    """Run `kind` once every `interval_s` (aligned to the epoch: slot n starts at
    n * interval_s), whichever runner queues it first."""

    kind: str
    interval_s: float
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    concurrency: int = 4
    lease_s: float = 60.0
    poll_s: float = 1.0
    #: The longest wait between rounds of an idle runner (see `_loop`).
    idle_poll_s: float = 5.0
    keep_finished_s: float = DEFAULT_KEEP_FINISHED_S
    #: How often expired leases are repaired and periodic jobs queued (each a read while
    #: there is nothing to do), and how often finished jobs past their expiry are deleted.
    housekeeping_s: float = 5.0
    prune_every_s: float = 300.0


def worker_name() -> str:
    """Who holds a lease, for the operator reading the jobs table: host, pid, a nonce."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class _Running:
    __slots__ = ("cancel_requested", "job", "lost", "task")

    def __init__(self, job: ClaimedJob, task: asyncio.Task[None]) -> None:
        self.job = job
        self.task = task
        self.lost = False
        self.cancel_requested = False


class JobRunner:
    def __init__(
        self,
        engine: AsyncEngine,
        kinds: Iterable[JobKind],
        *,
        sealer: Sealer | None = None,
        services: Any = None,
        options: RunnerOptions | None = None,
        schedules: Sequence[Schedule] = (),
        metrics: Metrics | None = None,
        worker: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.kinds = {kind.name: kind for kind in kinds}
        self.sealer = sealer
        self.services = services
        self.options = options or RunnerOptions()
        self.schedules = tuple(schedules)
        self.metrics = metrics
        self.worker = worker or worker_name()
        self.clock = clock
        self._running: dict[str, _Running] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._next_housekeeping = 0.0
        self._next_prune = 0.0
        #: The slot of each schedule this runner saw queued: asked again only when it moves.
        self._queued_slots: dict[str, int] = {}
        for schedule in self.schedules:
            if schedule.kind not in self.kinds:
                raise ValueError(f"schedule for unknown job kind {schedule.kind!r}")

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        if metrics := self.metrics:
            metrics.watch(metrics.jobs_running, lambda: len(self._running))
        self._loop_task = asyncio.create_task(self._loop(), name="jobs")
        self._heartbeat_task = asyncio.create_task(self._heartbeats(), name="jobs-heartbeat")

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop claiming; let running jobs finish within `timeout_s`; give the rest back to
        the queue (another worker takes them at once, not after their lease)."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            await self._loop_task
        tasks = [running.task for running in self._running.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        for running in list(self._running.values()):
            running.task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task

    def wake(self) -> None:
        """Look for due jobs now (a job was just queued in this process)."""
        self._wake.set()

    @property
    def running(self) -> int:
        return len(self._running)

    # -- the loop ------------------------------------------------------------------------

    async def _loop(self) -> None:
        """Rounds until stopped. While rounds find nothing, the wait between them doubles from
        `poll_s` up to `idle_poll_s` (an idle gateway's runner costs a few reads a minute);
        a claim, or a job queued in this process (`wake`), brings it back to `poll_s`."""
        options = self.options
        idle_s = options.poll_s
        while not self._stopping:
            try:
                claimed = await self.run_round()
                if claimed or self._running:
                    idle_s = options.poll_s
                else:
                    idle_s = min(idle_s * 2, max(options.idle_poll_s, options.poll_s))
            except Exception as exc:  # noqa: BLE001 - process boundary: the database may be down
                log.warning("jobs_round_failed", error=str(exc))
                claimed = 0
                idle_s = min(idle_s * 2, 30.0)
            if claimed and len(self._running) < options.concurrency:
                continue  # more may be due
            self._wake.clear()
            # +-10 %: apart from the process's other periodic work (the snapshot poll).
            # asyncio.timeout, not wait_for: no task made and cancelled at each timeout (that
            # and the round's first checkout were one slice of the loop, up to 0.8 ms cold).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(idle_s * random.uniform(0.9, 1.1)):
                    await self._wake.wait()
                    idle_s = options.poll_s

    async def run_round(self) -> int:
        """One round: housekeeping when due, then claim what fits and start it. The number
        of jobs claimed."""
        now = self.clock()
        if now >= self._next_housekeeping:
            self._next_housekeeping = now + self.options.housekeeping_s
            await self.housekeeping(now)
        free = self.options.concurrency - len(self._running)
        if free <= 0 or self._stopping:
            return 0
        claimed = await queue.claim(
            self.engine,
            self.worker,
            tuple(self.kinds),
            limit=free,
            lease_s=self.options.lease_s,
            now=now,
        )
        for job in claimed:
            task = asyncio.create_task(self._attempt(job), name=f"job-{job.kind}-{job.id}")
            self._running[job.id] = _Running(job, task)
        return len(claimed)

    async def housekeeping(self, now: float) -> None:
        requeued, failed = await queue.repair_expired(self.engine, now=now)
        if requeued or failed:
            log.warning("jobs_leases_expired", requeued=requeued, failed=failed)
            if self.metrics is not None:
                self.metrics.jobs_leases_repaired.labels("queued").inc(requeued)
                self.metrics.jobs_leases_repaired.labels("failed").inc(failed)
        for schedule in self.schedules:
            slot = int(now // schedule.interval_s)
            if self._queued_slots.get(schedule.kind) == slot:
                continue  # queued (by this runner or another) in an earlier round
            async with background_begin(self.engine) as conn:
                await queue.enqueue(
                    conn,
                    schedule.kind,
                    schedule.payload,
                    now=now,
                    run_at=slot * schedule.interval_s,
                    dedupe_key=f"{schedule.kind}@{slot}",
                    max_attempts=self.kinds[schedule.kind].max_attempts,
                )
            self._queued_slots[schedule.kind] = slot
        if now >= self._next_prune:
            self._next_prune = now + self.options.prune_every_s
            await queue.prune(self.engine, now=now, keep_finished_s=self.options.keep_finished_s)

    async def run_until_idle(self, timeout_s: float = 30.0) -> None:
        """For tests and one-off commands: rounds until nothing is due or running."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            claimed = await self.run_round()
            if self._running:
                await asyncio.wait(
                    [r.task for r in self._running.values()],
                    return_when=asyncio.FIRST_COMPLETED,
                )
            elif not claimed:
                # Idle, unless a due job was passed over: a claim skips rows another
                # transaction holds, and a retry due "now" can be a hair ahead of a clock
                # read just after it. Look again shortly, within the deadline.
                soon = self.clock() + _IDLE_GRACE_S
                if not await queue.any_due(self.engine, tuple(self.kinds), soon):
                    return
                await asyncio.sleep(self.options.poll_s)
        raise TimeoutError("jobs still running or due")

    # -- one attempt ---------------------------------------------------------------------

    async def _attempt(self, job: ClaimedJob) -> None:
        kind = self.kinds[job.kind]
        context = JobContext(job, self.engine, self.sealer, self.services, self.options.lease_s)
        outcome = "lost"
        engine = self.engine
        keep_s: float | None = kind.keep_finished_s or self.options.keep_finished_s
        if kind.keep_expiry:
            keep_s = None
        try:
            try:
                result = await asyncio.wait_for(kind.run(context), kind.timeout_s)
            except TimeoutError:
                raise RetryLater(f"the attempt ran longer than {kind.timeout_s:g}s") from None
            now = self.clock()
            await queue.succeed(
                engine,
                job.id,
                job.epoch,
                now=now,
                result=result,
                result_sealed=context.sealed_result,
                release_dedupe=kind.release_dedupe,
                expires_at=_expiry(now, keep_s),
            )
            outcome = "succeeded"
        except RunAgainAt as again:
            await queue.reschedule(engine, job.id, job.epoch, run_at=again.at, now=self.clock())
            outcome = "rescheduled"
        except GiveUp as given_up:
            now = self.clock()
            await queue.fail(
                engine,
                job.id,
                job.epoch,
                str(given_up),
                now=now,
                retry_at=None,
                release_dedupe=kind.release_dedupe,
                result=given_up.result,
                expires_at=_expiry(now, keep_s),
            )
            outcome = "failed"
        except RetryLater as retry:
            outcome = await self._failed(job, kind, str(retry), retry.delay_s, keep_s)
        except LeaseLost:
            log.warning("job_lease_lost", job_id=job.id, kind=job.kind)
        except asyncio.CancelledError:
            outcome = await self._cancelled(job, kind)
        except Exception as exc:
            log.exception("job_failed", job_id=job.id, kind=job.kind)
            outcome = await self._failed(job, kind, f"{type(exc).__name__}: {exc}", None, keep_s)
        finally:
            self._running.pop(job.id, None)
            if self.metrics is not None:
                self.metrics.jobs_finished.labels(job.kind, outcome).inc()

    async def _failed(
        self,
        job: ClaimedJob,
        kind: JobKind,
        error: str,
        delay_s: float | None,
        keep_s: float | None,
    ) -> str:
        now = self.clock()
        delay = kind.backoff(job.attempts) if delay_s is None else delay_s
        try:
            state = await queue.fail(
                self.engine,
                job.id,
                job.epoch,
                error,
                now=now,
                retry_at=now + delay,
                release_dedupe=kind.release_dedupe,
                expires_at=_expiry(now, keep_s),
            )
        except LeaseLost:
            return "lost"
        log.warning("job_attempt_failed", job_id=job.id, kind=job.kind, error=error, state=state)
        return "retry" if state == QUEUED else "failed"

    async def _cancelled(self, job: ClaimedJob, kind: JobKind) -> str:
        """The attempt's task was cancelled: a cancel was asked for (the job ends cancelled),
        the lease was lost (nothing to write), or the runner is stopping (the job goes back
        to the queue at once)."""
        running = self._running.get(job.id)
        now = self.clock()
        try:
            if running is not None and running.lost:
                return "lost"
            if running is not None and running.cancel_requested:
                await queue.mark_cancelled(
                    self.engine, job.id, job.epoch, now=now, release_dedupe=kind.release_dedupe
                )
                return "cancelled"
            await queue.reschedule(self.engine, job.id, job.epoch, run_at=now, now=now)
            return "returned"
        except LeaseLost:
            return "lost"

    async def _heartbeats(self) -> None:
        interval = min(self.options.lease_s / 3, 5.0)  # also how soon a cancel is seen
        while True:
            await asyncio.sleep(interval)
            for running in list(self._running.values()):
                job = running.job
                try:
                    cancel = await queue.heartbeat(
                        self.engine,
                        job.id,
                        job.epoch,
                        lease_s=self.options.lease_s,
                        now=self.clock(),
                    )
                except LeaseLost:
                    running.lost = True
                    running.task.cancel()
                    continue
                except Exception as exc:  # noqa: BLE001 - the database may be away a while
                    log.warning("job_heartbeat_failed", job_id=job.id, error=str(exc))
                    continue
                if cancel and not running.cancel_requested:
                    running.cancel_requested = True
                    running.task.cancel()


def _expiry(now: float, keep_s: float | None) -> float | None:
    """When a job ending now is deleted (None: the expiry it was queued with stands)."""
    return None if keep_s is None else now + keep_s

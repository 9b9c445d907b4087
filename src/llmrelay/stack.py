"""What every process that calls models builds at start and takes down at exit: the engine,
the config snapshot with live reload, the provider registry and executor, the recorder, the
limiter, tracing, and the durable job runner. `serve` (app.py's lifespan) adds the HTTP side;
`llmrelay worker` (worker.py) runs this alone with the runner.

One order for both, so a worker's model calls are admitted, routed, metered and recorded
exactly as a served request's are.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, cast

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing.allowance import Leases
from llmrelay.billing.estimate import ReservePolicy
from llmrelay.billing.prepaid import Prepaid
from llmrelay.codex_vault import DatabaseVault
from llmrelay.deadlines import Deadlines
from llmrelay.gateway.dispatch import Dispatcher, Runtime
from llmrelay.gateway.durable import DurableJobs
from llmrelay.gateway.executor import Executor
from llmrelay.gateway.journal import ROTATE_S, Journal, Marks, release
from llmrelay.gateway.recorder import Recorder
from llmrelay.gateway.trials import BreakerTrials
from llmrelay.gateway.watch import ClientWatches
from llmrelay.jobs.probe_trigger import ProbeTrigger
from llmrelay.jobs.runner import JobRunner, RunnerOptions
from llmrelay.jobs.services import Services
from llmrelay.limits.base import Limiter
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.spend import seed as seed_spend
from llmrelay.observability.metrics import Metrics
from llmrelay.observability.tracing import Tracing
from llmrelay.observability.tracing import from_environment as tracing_from_environment
from llmrelay.outbound.policy import OutboundPolicies
from llmrelay.providers.codex.accounts import CodexAccounts
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.routing.breaker import Breakers
from llmrelay.routing.strategies import Router
from llmrelay.settings import Settings
from llmrelay.shared.state import SharedState
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.model import Snapshot
from llmrelay.snapshot.reload import LiveReload
from llmrelay.store import migrate, rollups
from llmrelay.store.backup import hold_in_use
from llmrelay.store.crypto import Sealer, sealer_for
from llmrelay.store.db import create_engine, is_sqlite, session_factory

log = structlog.get_logger(__name__)


class SchemaOutOfDate(RuntimeError):
    """The database schema is not at the version this program needs."""


@dataclass(slots=True)
class Stack:
    settings: Settings
    engine: AsyncEngine
    sealer: Sealer
    snapshots: SnapshotHolder
    registry: ProviderRegistry
    recorder: Recorder
    limiter: Limiter
    tracing: Tracing | None
    live_reload: LiveReload
    runtime: Runtime
    prepaid: Prepaid
    #: The job runner (None: this process runs no jobs, LLMRELAY_JOBS_IN_PROCESS=false).
    runner: JobRunner | None = None
    #: SQLite: this process's mark that the database is in use (`llmrelay restore` waits).
    in_use: IO[bytes] | None = None
    #: Queues a health probe when a provider refuses the gateway's credentials.
    probe_trigger: ProbeTrigger | None = None
    #: What the replicas share (None: one process on SQLite without Redis, all in memory).
    shared: SharedState | None = None
    #: Deletes the journal's files as their rows become durable (gateway/journal.py).
    journal_tidy: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, settings: Settings, metrics: Metrics, dispatcher: Dispatcher, *, jobs: bool
    ) -> Stack:
        """Everything up, in order; `dispatcher.runtime` set. Raises SchemaOutOfDate."""
        engine = create_engine(settings.database_url)
        try:
            if not await migrate.is_up_to_date(engine):
                raise SchemaOutOfDate(
                    "the database schema is not up to date: run `llmrelay migrate`"
                )
            sealer = sealer_for(settings)
            snapshots = SnapshotHolder(session_factory(engine), sealer)
            await snapshots.load()
            loop = asyncio.get_running_loop()
            deadlines = Deadlines(loop)
            outbound = OutboundPolicies.from_settings(settings)
            registry = ProviderRegistry(
                HttpTransport(deadlines, operator=outbound.operator, tenant=outbound.tenant),
                codex=CodexAccounts(
                    DatabaseVault(session_factory(engine), sealer),
                    margin_s=settings.codex_refresh_margin_s,
                    issuer=settings.codex_issuer,
                    client_id=settings.codex_client_id,
                ),
            )
            recorder = Recorder(
                engine,
                max_queue=settings.record_queue_size,
                spool_dir=settings.spool_path,
                metrics=metrics,
            )
        except BaseException:
            await engine.dispose()
            raise
        prepaid = _prepaid(settings, metrics, engine)
        if recorder.spool is not None:  # a dead process's journal holds lease settles too
            recorder.spool.write_settles = prepaid.write_journaled
        recorder.start()
        prepaid.start()
        journal = _journal(settings, recorder, prepaid)
        limiter = _limiter(settings, metrics, engine)
        tracing = tracing_from_environment()
        await limiter.start()
        await rollups.refresh_all(engine)  # budgets below read the rollups
        await seed_spend(limiter, engine, time.time())
        runtime = Runtime(
            snapshots,
            _executor(registry, snapshots, metrics),
            recorder,
            metrics,
            settings.max_body_bytes,
            ClientWatches(loop),
            deadlines,
            limiter,
            settings.tpm_default_output_tokens,
            tracing,
            settings.record_requests,
            capture_max_bytes=settings.capture_max_bytes,
            prepaid=prepaid,
            guard_max_chars=settings.guardrails_max_chars,
            body_timeout_s=settings.body_timeout_s,
            journal=journal,
        )
        dispatcher.runtime = runtime
        runtime.executor.resources.share = _share_of(limiter, settings.workers)
        live_reload = LiveReload(
            snapshots,
            engine=engine,
            database_url=settings.database_url,
            redis_url=settings.redis_url,
            metrics=metrics,
        )
        live_reload.start()
        stack = cls(
            settings,
            engine,
            sealer,
            snapshots,
            registry,
            recorder,
            limiter,
            tracing,
            live_reload,
            runtime,
            prepaid,
        )
        if settings.sqlite_path is not None:
            stack.in_use = hold_in_use(settings.sqlite_path)
        if journal is not None:
            stack.journal_tidy = asyncio.create_task(_tidy(journal), name="llmrelay-journal")
        if jobs:
            stack.runner = _runner(stack, dispatcher, metrics)
            stack.runner.start()
        wake = stack.runner.wake if stack.runner is not None else None
        stack.probe_trigger = ProbeTrigger(engine, wake=wake)
        runtime.executor.on_credentials_refused = stack.probe_trigger
        dispatcher.durable = _submissions(stack)
        stack.shared = SharedState.open(settings.redis_url, engine)
        if stack.shared is not None:
            stack.shared.install(dispatcher, runtime.executor, sealer)
        return stack

    async def close(self) -> None:
        """Everything down, in the reverse order: jobs first (their calls finish or go back
        to the queue), then the records they and the requests left are flushed, the prepaid
        settles last. One budget for the three waits, LLMRELAY_DRAIN_TIMEOUT_S (5 s at
        least), so a stop takes at most about twice the drain timeout in all (the requests'
        drain, then this): what a supervisor's stop timeout must allow (docs/deployment.md)."""
        loop = asyncio.get_running_loop()
        ends = loop.time() + max(self.settings.drain_timeout_s, 5.0)

        def left() -> float:
            """What is left of the budget; never under half a second, so a slow step before
            still leaves the next one time to put what it holds somewhere safe."""
            return max(ends - loop.time(), 0.5)

        if self.runner is not None:
            await self.runner.stop(timeout_s=left())
        if self.probe_trigger is not None:
            await self.probe_trigger.close()
        await self.live_reload.stop()
        if self.runtime.executor.trials is not None:
            await self.runtime.executor.trials.close()
        if self.shared is not None:
            await self.shared.close()
        await self.recorder.stop(timeout_s=left())
        await self.prepaid.stop(timeout_s=left())
        if self.journal_tidy is not None:
            self.journal_tidy.cancel()
        journal = self.runtime.journal
        if journal is not None:
            journal.close()
        await self.limiter.close()
        if self.tracing is not None:
            await self.tracing.close(timeout_s=5)
        await self.registry.close()
        await self.engine.dispose()
        if self.in_use is not None:
            self.in_use.close()


def _runner(stack: Stack, dispatcher: Dispatcher, metrics: Metrics) -> JobRunner:
    from llmrelay.jobs.registry import job_kinds, schedules

    settings = stack.settings
    runner = JobRunner(
        stack.engine,
        job_kinds(),
        sealer=stack.sealer,
        options=RunnerOptions(
            concurrency=settings.jobs_concurrency,
            lease_s=settings.jobs_lease_s,
            poll_s=settings.jobs_poll_s,
            idle_poll_s=settings.jobs_idle_poll_s,
            keep_finished_s=settings.jobs_keep_finished_s,
            prune_every_s=settings.jobs_prune_interval_s,
        ),
        schedules=schedules(settings),
        metrics=metrics,
    )
    runner.services = Services(
        settings,
        stack.engine,
        stack.sealer,
        dispatcher,
        stack.registry,
        publisher=stack.live_reload.publisher,
        wake=runner.wake,
        provider_online=provider_online(stack),
    )
    return runner


def provider_online(stack: Stack) -> Callable[[str], None] | None:
    """What a health probe that found a provider online calls: this process's breakers of
    the provider's routes close (gateway/trials.py)."""
    trials = stack.runtime.executor.trials
    return None if trials is None else trials.provider_online


def _submissions(stack: Stack) -> DurableJobs:
    """Background responses and queued generations, woken in this process when it runs jobs
    (else the next poll of a `llmrelay worker` finds them)."""
    from llmrelay.jobs.submissions import Submissions

    wake = stack.runner.wake if stack.runner is not None else None
    return Submissions(stack.settings, stack.engine, stack.sealer, wake)


def _prepaid(settings: Settings, metrics: Metrics, engine: AsyncEngine) -> Prepaid:
    """Reservations and settles of prepaid tenants' requests (only they use it)."""
    policy = ReservePolicy(
        default_max_output_tokens=settings.billing_default_max_output_tokens,
        unpriced_reserve_micros=settings.billing_unpriced_reserve_micros,
    )
    leases = None
    if settings.billing_leases:
        leases = Leases(
            engine,
            owner=f"{socket.gethostname()}:{os.getpid()}",
            chunk_requests=settings.billing_lease_requests,
            ttl_s=settings.billing_lease_ttl_s,
            reserve_timeout_s=settings.billing_reserve_timeout_s,
        )
    return Prepaid(
        engine,
        policy,
        metrics=metrics,
        max_queue=settings.billing_settle_queue_size,
        reserve_timeout_s=settings.billing_reserve_timeout_s,
        leases=leases,
    )


def _journal(settings: Settings, recorder: Recorder, prepaid: Prepaid) -> Journal | None:
    """The journal of ended requests (gateway/journal.py), beside the spool that replays it."""
    directory = settings.spool_path
    if not settings.journal or directory is None:
        return None
    leases = prepaid.leases
    writer = prepaid.lease_writer
    marks = Marks(
        queued_records=lambda: recorder.queued_total,
        durable_records=lambda: recorder.durable_total,
        queued_settles=(lambda: 0) if leases is None else (lambda: leases.ended_total),
        durable_settles=(lambda: 0) if writer is None else (lambda: writer.durable_total),
    )
    return Journal(directory, marks)


async def _tidy(journal: Journal) -> None:
    """Once a second: what the journal is done with is deleted on a thread (journal.release:
    the kernel's work of freeing a second's file stays off the event loop)."""
    while True:
        await asyncio.sleep(ROTATE_S)
        try:
            done = journal.sort_out()
            if done:
                await asyncio.to_thread(release, journal.directory, done)
        except OSError as exc:  # a failing disk: the files stay, for a replay
            log.warning("journal_tidy_failed", error=str(exc))


def _limiter(settings: Settings, metrics: Metrics, engine: AsyncEngine) -> Limiter:
    """Redis when configured (with the failure policy); else PostgreSQL's tables when the
    database is PostgreSQL (the same policy while it is unreachable); else in process, each
    of `serve --workers N` enforcing 1/N of every limit so N never multiply them."""
    shared_on_database = settings.limits_on_database and not is_sqlite(settings.database_url)
    if settings.redis_url is None and not shared_on_database:
        if settings.workers > 1:
            log.info("limits_divided_among_workers", workers=settings.workers)
        return LocalLimiter(share=settings.workers)
    from llmrelay.limits.resilient import ResilientLimiter, SettleFailed, Shared

    limiter: ResilientLimiter | None = None

    async def reseed() -> None:
        assert limiter is not None
        await seed_spend(limiter, engine, time.time())

    if settings.redis_url is not None:
        limiter = ResilientLimiter(
            settings.redis_url, settings.limits_on_redis_failure, metrics, on_recovered=reseed
        )
        return limiter
    from llmrelay.limits.postgres import DatabaseLimiter

    def database(on_settle_failed: SettleFailed) -> Shared:
        return DatabaseLimiter(settings.database_url, on_settle_failed=on_settle_failed)

    limiter = ResilientLimiter(
        None,
        settings.limits_on_redis_failure,
        metrics,
        on_recovered=reseed,
        shared=database,
        store="database",
    )
    return limiter


def _share_of(limiter: Limiter, workers: int) -> Callable[[], int]:
    """How many processes share a quota kept in process (provider resources' buckets): the
    shared limiter's live replicas, else this `serve`'s workers."""
    replicas = getattr(limiter, "replicas", None)
    if callable(replicas):
        return cast("Callable[[], int]", replicas)
    return lambda: max(1, workers)


def _executor(registry: ProviderRegistry, snapshots: SnapshotHolder, metrics: Metrics) -> Executor:
    """The executor with its breakers and router; both follow config reloads."""

    def count(route: str, from_state: str, to_state: str) -> None:
        metrics.breaker_transitions.labels(route, from_state, to_state).inc()

    breakers = Breakers(snapshots.current.breaker, on_transition=count)
    trials = BreakerTrials(
        registry, breakers, lambda: snapshots.current, asyncio.get_running_loop()
    )
    breakers.on_open = trials.schedule
    router = Router()
    metrics.watch_breakers(breakers.states)

    #: The denylist of the snapshot last followed.
    denied = [snapshots.current.denied_providers]

    def follow(snapshot: Snapshot) -> None:
        breakers.update_settings(snapshot.breaker)
        every = [
            route
            for models in snapshot.models.values()
            for model in models.values()
            for route in model.routes
        ]
        routes = {route.id for route in every}
        # A provider a probe found online again (it left the denylist): its routes' breakers,
        # opened by the failures that had it probed, start closed (the probe just succeeded).
        back = denied[0] - snapshot.denied_providers
        denied[0] = snapshot.denied_providers
        kept = {route.id for route in every if route.provider.id not in back}
        # Resources' breakers (shared by the routes to their provider) stay as they are.
        accounts = {v.resource.id for r in every for v in r.variants if v.resource is not None}
        kept.update(f"resource:{account}" for account in accounts)
        breakers.forget(kept)
        router.latency.forget(routes)
        executor.resources.forget(accounts)

    snapshots.listeners.append(follow)
    executor = Executor(registry, breakers, router)
    executor.trials = trials
    return executor

"""Assembling the ASGI application: routes, ingress, and the start-up/shutdown sequence."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from llmrelay.admin.cors import with_cors
from llmrelay.admin.identity.bootstrap import ensure_bootstrap_admin
from llmrelay.admin.state import AdminState, SessionPolicy
from llmrelay.deadlines import Deadlines
from llmrelay.gateway.endpoints import DataPlane, Runtime
from llmrelay.gateway.entry import GatewayApp
from llmrelay.gateway.errors import GatewayError, NotFound
from llmrelay.gateway.executor import Executor
from llmrelay.gateway.ingress import IngressMiddleware, RequestContext
from llmrelay.gateway.recorder import Recorder
from llmrelay.gateway.watch import ClientWatches
from llmrelay.limits.base import Limiter
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.spend import seed as seed_spend
from llmrelay.observability.health import Health
from llmrelay.observability.logging import configure_logging
from llmrelay.observability.metrics import Metrics
from llmrelay.observability.tracing import from_environment as tracing_from_environment
from llmrelay.protocols.openai import error_body
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.routing.breaker import Breakers
from llmrelay.routing.strategies import Router
from llmrelay.settings import Settings
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.model import Snapshot
from llmrelay.snapshot.reload import LiveReload
from llmrelay.store import migrate, partitions, payload_retention, retention, rollups
from llmrelay.store.crypto import sealer_for
from llmrelay.store.db import create_engine, session_factory

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
log = structlog.get_logger(__name__)


class SchemaOutOfDate(RuntimeError):
    """The database schema is not at the version this program needs."""


class _Endpoint:
    """Makes a bound handler a plain ASGI app, so Starlette builds no Request for it."""

    __slots__ = ("_handler",)

    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._handler(scope, receive, send)


class _BuiltOnFirstUse:
    """An ASGI app made on its first request. The admin API's routers and schemas take about
    half a second to import and build (Pydantic makes each model's schema as its class is
    created); the data plane's start, and its readiness, should not wait for them."""

    __slots__ = ("_app", "_build")

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is None:
            app = self._app = self._build()
        await app(scope, receive, send)


def _admin_app(admin: AdminState, settings: Settings) -> ASGIApp:
    from llmrelay.admin.app import create_admin  # imported here: see _BuiltOnFirstUse

    return with_cors(create_admin(admin), settings)


class _Refused:
    """Stands in for a data-plane route in Starlette's table, so a wrong method there gets
    Starlette's 405; the right method never reaches it (GatewayApp dispatches it first)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise HTTPException(404)


def create_app(settings: Settings) -> GatewayApp:
    metrics = Metrics()
    dataplane = DataPlane()
    health = Health(metrics, settings.metrics_token)
    handlers = dataplane.handlers()
    admin = AdminState(settings.admin_token, sessions=SessionPolicy.from_settings(settings))
    routes: list[BaseRoute] = [
        Route(path, _Refused(), methods=[method]) for method, path in handlers
    ]
    routes += [
        Route("/livez", _Endpoint(health.livez), methods=["GET"]),
        Route("/readyz", _Endpoint(health.readyz), methods=["GET"]),
        Route("/healthz", _Endpoint(health.readyz), methods=["GET"]),
        Route("/metrics", _Endpoint(health.metrics), methods=["GET"]),
        Mount("/api/admin", app=_BuiltOnFirstUse(partial(_admin_app, admin, settings))),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        configure_logging(settings.log_level)
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
            registry = ProviderRegistry(HttpTransport(deadlines))
            executor = _executor(registry, snapshots, metrics)
            recorder = Recorder(
                engine,
                max_queue=settings.record_queue_size,
                spool_dir=settings.spool_path,
                metrics=metrics,
            )
            recorder.start()
            limiter = _limiter(settings, metrics, engine)
            tracing = tracing_from_environment()
            await limiter.start()
            await rollups.refresh_all(engine)  # budgets below read the rollups
            await seed_spend(limiter, engine, time.time())
            metrics.watch(metrics.record_queue_depth, lambda: recorder.depth)
            metrics.watch(metrics.snapshot_generation, lambda: snapshots.current.generation)
            metrics.watch(metrics.snapshot_age, snapshots.age_s)
            dataplane.runtime = Runtime(
                snapshots,
                executor,
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
            )
            live_reload = LiveReload(
                snapshots,
                engine=engine,
                database_url=settings.database_url,
                redis_url=settings.redis_url,
                metrics=metrics,
            )
            live_reload.start()
            admin.publisher = live_reload.publisher  # the admin API announces its changes
            health.engine, health.snapshots, health.live_reload = engine, snapshots, live_reload
            admin.engine, admin.sealer = engine, sealer
            await ensure_bootstrap_admin(engine, settings, admin.passwords)
            poller = asyncio.create_task(snapshots.poll(settings.snapshot_poll_s))
            rollup_task = asyncio.create_task(rollups.run(engine, settings.rollup_interval_s))
            # PostgreSQL: the months ahead of request_records exist (now, then daily).
            partitioner = asyncio.create_task(partitions.run(engine))
            pruner = None
            if settings.record_retention_days is not None:
                pruner = asyncio.create_task(
                    retention.run(
                        engine, settings.record_retention_days, settings.retention_interval_s
                    )
                )
            payload_pruner = None
            payload_days = payload_retention.retention_days(
                settings.payload_retention_days, settings.record_retention_days
            )
            if payload_days is not None:
                payload_pruner = asyncio.create_task(
                    payload_retention.run(engine, payload_days, settings.retention_interval_s)
                )
            settle_garbage_collector()
            try:
                yield
            finally:
                poller.cancel()
                await live_reload.stop()
                rollup_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await rollup_task
                partitioner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await partitioner
                if pruner is not None:
                    pruner.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pruner
                if payload_pruner is not None:
                    payload_pruner.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await payload_pruner
                with contextlib.suppress(asyncio.CancelledError):
                    await poller  # its database work ends before the engine is disposed
                await recorder.stop(timeout_s=max(settings.drain_timeout_s, 5.0))
                await limiter.close()
                if tracing is not None:
                    await tracing.close(timeout_s=5)
                await registry.close()
        finally:
            await engine.dispose()

    fallback = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                IngressMiddleware,
                max_body_bytes=settings.max_body_bytes,
                trusted_proxies=settings.trusted_proxies,
            )
        ],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    return GatewayApp(
        handlers,
        fallback,
        trusted_proxies=settings.trusted_proxies,
        max_body_bytes=settings.max_body_bytes,
        prefixed=dataplane.prefixed(),
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods, in the OpenAI error shape."""
    assert isinstance(exc, HTTPException)
    context: RequestContext | None = request.scope.get("llmrelay")
    request_id = context.request_id if context else ""
    error: GatewayError = NotFound(f"no route for {request.method} {request.url.path}")
    error.status = exc.status_code
    if exc.status_code == 405:
        error.code = "method_not_allowed"
        error.message = f"{request.method} is not allowed on {request.url.path}"
    return Response(error_body(error, request_id), exc.status_code, media_type="application/json")


def _limiter(settings: Settings, metrics: Metrics, engine: AsyncEngine) -> Limiter:
    """Redis when configured (with the failure policy); else in process, each of
    `serve --workers N` enforcing 1/N of every limit so N never multiply them."""
    if settings.redis_url is None:
        if settings.workers > 1:
            log.info("limits_divided_among_workers", workers=settings.workers)
        return LocalLimiter(share=settings.workers)
    from llmrelay.limits.resilient import ResilientLimiter  # imports redis: only when used

    limiter: ResilientLimiter | None = None

    async def reseed() -> None:
        assert limiter is not None
        await seed_spend(limiter, engine, time.time())

    limiter = ResilientLimiter(
        settings.redis_url, settings.limits_on_redis_failure, metrics, on_recovered=reseed
    )
    return limiter


def _executor(registry: ProviderRegistry, snapshots: SnapshotHolder, metrics: Metrics) -> Executor:
    """The executor with its breakers and router; both follow config reloads."""

    def count(route: str, from_state: str, to_state: str) -> None:
        metrics.breaker_transitions.labels(route, from_state, to_state).inc()

    breakers = Breakers(snapshots.current.breaker, on_transition=count)
    router = Router()
    metrics.watch_breakers(breakers.states)

    def follow(snapshot: Snapshot) -> None:
        breakers.update_settings(snapshot.breaker)
        routes = {
            route.id
            for models in snapshot.models.values()
            for model in models.values()
            for route in model.routes
        }
        breakers.forget(routes)
        router.latency.forget(routes)

    snapshots.listeners.append(follow)
    return Executor(registry, breakers, router)


def settle_garbage_collector() -> None:
    """Keep the cyclic GC off the request path as far as is safe.

    Everything built at start-up (modules, SQLAlchemy metadata, the snapshot) lives for the
    whole process; `gc.freeze()` takes it out of every later collection, so a collection only
    walks what requests allocated. A larger first-generation threshold makes collections rarer;
    request objects are freed by reference counting, so few reach the collector at all.
    Measured: the collector was about a tenth of the CPU per request before (docs/performance.md).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def app_from_env() -> GatewayApp:
    """Factory for `uvicorn --factory` and worker processes: settings from the environment.
    Each serving process writes its response heads with compiled code (server_head.py)."""
    from llmrelay.server_head import install

    install()
    return create_app(Settings())

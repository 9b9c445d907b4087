"""Assembling the ASGI application: routes, ingress, and the start-up/shutdown sequence."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, NoMatchFound, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from llmrelay.admin.cors import with_cors
from llmrelay.admin.identity.bootstrap import ensure_bootstrap_admin
from llmrelay.admin.sso.client import ProviderClient
from llmrelay.admin.sso.config import SsoConfig
from llmrelay.admin.state import AccountPolicy, AdminState, SessionPolicy
from llmrelay.billing import webhook_route
from llmrelay.billing.payments import Payments
from llmrelay.billing.stripe_config import StripeConfig
from llmrelay.gateway.cors import DataPlaneCors
from llmrelay.gateway.endpoints import DataPlane
from llmrelay.gateway.entry import GatewayApp, error_renderer
from llmrelay.gateway.errors import GatewayError, NotFound
from llmrelay.gateway.ingress import IngressMiddleware, RequestContext
from llmrelay.jobs.probe import Prober
from llmrelay.listeners import ListenerSplit
from llmrelay.observability.health import Health
from llmrelay.observability.logging import configure_logging
from llmrelay.observability.loop_lag import LoopLagSampler
from llmrelay.observability.metrics import Metrics
from llmrelay.outbound.policy import OutboundPolicies
from llmrelay.settings import Settings
from llmrelay.stack import Stack, provider_online
from llmrelay.store import partitions, rollups

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
log = structlog.get_logger(__name__)


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


def _console_app(admin_app: ASGIApp, admin: AdminState, settings: Settings) -> ASGIApp:
    from llmrelay.console.app import create_console  # imported here: see _BuiltOnFirstUse

    return create_console(admin_app, settings, lambda: admin.sealer)


class _Console(BaseRoute):
    """The web console: the last route, taking every path the routes before it did not,
    except the data plane's and the APIs' own (an unknown path under /v1, /v1beta, /v1alpha,
    /openai or /api keeps its JSON 404 in that API's shape, a wrong method on /livez its
    405)."""

    _NOT_MINE = ("/v1/", "/v1beta/", "/v1alpha/", "/openai/", "/api/")
    _EXACT = frozenset(
        {"/v1", "/v1beta", "/v1alpha", "/openai", "/api"}
        | {"/livez", "/readyz", "/healthz", "/metrics"}
    )

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or path in self._EXACT or path.startswith(self._NOT_MINE):
            return Match.NONE, {}
        return Match.FULL, {}

    def url_path_for(self, name: str, /, **path_params: object) -> Any:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class _Refused:
    """Stands in for a data-plane route in Starlette's table, so a wrong method there gets
    Starlette's 405; the right method never reaches it (GatewayApp dispatches it first)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise HTTPException(404)


def create_app(settings: Settings) -> ASGIApp:
    metrics = Metrics()
    dataplane = DataPlane()
    health = Health(metrics, settings.metrics_token)
    handlers = dataplane.handlers()
    admin = AdminState(
        settings.admin_token,
        sessions=SessionPolicy.from_settings(settings),
        accounts=AccountPolicy.from_settings(settings),
        outbound=OutboundPolicies.from_settings(settings),
        audit_reads=settings.audit_admin_reads,
    )
    sso = SsoConfig.from_settings(settings)  # a wrong role map stops the start, named
    if sso is not None:
        admin.sso, admin.sso_client = sso, ProviderClient(sso)
    stripe_webhook = webhook_route.StripeWebhookRoute()
    admin_app = _BuiltOnFirstUse(partial(_admin_app, admin, settings))
    routes: list[BaseRoute] = [
        Route(path, _Refused(), methods=[method]) for method, path in handlers
    ]
    probes: list[BaseRoute] = [
        Route("/livez", _Endpoint(health.livez), methods=["GET"]),
        Route("/readyz", _Endpoint(health.readyz), methods=["GET"]),
        Route("/healthz", _Endpoint(health.readyz), methods=["GET"]),
    ]
    routes += [*probes, Route(webhook_route.PATH, stripe_webhook, methods=["POST"])]
    #: The control plane and /metrics: on the admin listener when there is one (listeners.py),
    #: else beside the data plane, after its routes (a console mounted at `/` goes here, last).
    control: list[BaseRoute] = [
        Route("/metrics", _Endpoint(health.metrics), methods=["GET"]),
        Mount("/api/admin", app=admin_app),
    ]
    if settings.console:
        control.append(
            _Console(_BuiltOnFirstUse(partial(_console_app, admin_app, admin, settings)))
        )
    admin_address = settings.admin_address
    if admin_address is None:
        routes += control

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        configure_logging(settings.log_level)
        stack = await Stack.open(settings, metrics, dataplane, jobs=settings.jobs_in_process)
        engine, snapshots, recorder = stack.engine, stack.snapshots, stack.recorder
        tasks: list[asyncio.Task[None]] = []
        payments: Payments | None = None
        lag: LoopLagSampler | None = None
        try:
            payments = Payments.from_config(
                engine, stack.sealer, StripeConfig.from_settings(settings), metrics
            )
            metrics.watch(metrics.record_queue_depth, lambda: recorder.depth)
            metrics.watch(metrics.snapshot_generation, lambda: snapshots.current.generation)
            metrics.watch(metrics.snapshot_age, snapshots.age_s)
            metrics.watch(metrics.providers_denied, lambda: len(snapshots.current.denied_providers))
            admin.publisher = stack.live_reload.publisher  # the admin API announces changes
            health.engine, health.snapshots = engine, snapshots
            health.live_reload = stack.live_reload
            admin.engine, admin.sealer = engine, stack.sealer
            # Provider health (admin/providers/health_*): probes as the jobs run them, this
            # process's breakers, and its job runner to wake after queueing a job.
            admin.prober = Prober(
                engine,
                stack.sealer,
                stack.registry,
                delays_s=settings.probe_delays_s,
                publisher=stack.live_reload.publisher,
                on_online=provider_online(stack),
            )
            admin.breakers = stack.runtime.executor.breakers
            admin.wake_jobs = stack.runner.wake if stack.runner is not None else None
            admin.payments = stripe_webhook.payments = payments
            await ensure_bootstrap_admin(engine, settings, admin.passwords)
            tasks.append(asyncio.create_task(snapshots.poll(settings.snapshot_poll_s)))
            tasks.append(asyncio.create_task(rollups.run(engine, settings.rollup_interval_s)))
            # PostgreSQL: the months ahead of request_records exist (now, then daily).
            tasks.append(asyncio.create_task(partitions.run(engine)))
            # Record and payload retention run as periodic jobs (jobs/retention.py).
            if settings.loop_lag_sample_s > 0:
                lag = LoopLagSampler(
                    asyncio.get_running_loop(),
                    metrics.event_loop_lag.observe,
                    settings.loop_lag_sample_s,
                )
                lag.start()
            settle_garbage_collector()
            yield
        finally:
            if lag is not None:
                lag.stop()
            for task in tasks:  # their database work ends before the engine is disposed
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if payments is not None:
                await payments.close()
            await stack.close()

    ingress = [
        Middleware(
            IngressMiddleware,
            max_body_bytes=settings.max_body_bytes,
            trusted_proxies=settings.trusted_proxies,
        )
    ]
    fallback = Starlette(
        routes=routes,
        middleware=ingress,
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    gateway = GatewayApp(
        handlers,
        fallback,
        trusted_proxies=settings.trusted_proxies,
        max_body_bytes=settings.max_body_bytes,
        prefixed=dataplane.prefixed(),
    )
    served: ASGIApp = gateway
    if settings.data_plane_origins:  # only then: none listed costs the data plane nothing
        served = DataPlaneCors(gateway, settings.data_plane_origins)
    if admin_address is None:
        return served
    control_app = Starlette(
        routes=[*probes, *control],
        middleware=ingress,
        exception_handlers={HTTPException: _http_error},
    )
    return ListenerSplit(served, control_app, admin_address[1])


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods, in the error shape of the API the path belongs to
    (gateway/entry.error_renderer: Anthropic's under /v1/messages, Google's under /v1beta and
    /v1alpha, OpenAI's elsewhere)."""
    assert isinstance(exc, HTTPException)
    context: RequestContext | None = request.scope.get("llmrelay")
    request_id = context.request_id if context else ""
    error: GatewayError = NotFound(f"no route for {request.method} {request.url.path}")
    error.status = exc.status_code
    if exc.status_code == 405:
        error.code = "method_not_allowed"
        error.message = f"{request.method} is not allowed on {request.url.path}"
    body = error_renderer(request.url.path)(error, request_id)
    return Response(body, exc.status_code, media_type="application/json")


#: The cyclic GC's thresholds after start-up (see settle_garbage_collector).
GC_THRESHOLDS = (1000, 20, 100)


def settle_garbage_collector() -> None:
    """Keep the cyclic GC off the request path as far as is safe.

    Everything built at start-up (modules, SQLAlchemy metadata, the snapshot) lives for the
    whole process; `gc.freeze()` takes it out of every later collection, so a collection only
    walks what requests allocated (before it, full collections of the start-up heap took
    65-80 ms each). Request objects are freed by reference counting; what a collection walks
    is what is alive and young when it runs, so its pause grows with the first threshold:
    measured by bench/stalls.py (CPU time, loaded machine, docs/performance.md "Stalls"), at
    10,000 a young collection took 1.5-4.7 ms under load; at 1,000 it takes about 0.3 ms, ten
    times as often (about the same CPU in all). The older generations are collected rarely
    (every 20 young collections, and the whole heap every 100 of those): what reaches them
    lives long, and a full collection of it is the longest pause of all.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def app_from_env() -> ASGIApp:
    """Factory for `uvicorn --factory` and worker processes: settings from the environment.
    Each serving process writes its response heads with compiled code (server_head.py) and
    takes its connection limits from its settings (server_protocol.py)."""
    from llmrelay import server_protocol
    from llmrelay.server_head import install

    install()
    settings = Settings()
    server_protocol.configure(
        settings.header_timeout_s,
        settings.body_timeout_s,
        settings.max_header_bytes,
        slow_reader_timeout_s=settings.slow_reader_timeout_s,
        write_buffer_bytes=settings.client_write_buffer_bytes,
    )
    return create_app(settings)

"""The `/v1/*` handlers: plain functions over (scope, receive, send, context), the snapshot
and the shared runtime.

Each request: authenticate from the snapshot, parse the body once, resolve the model,
send to the first route that answers, pass the answer through with `model` renamed to the
virtual model, and queue one record. Errors are rendered in one place (`model_call`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay.deadlines import Deadlines
from llmrelay.gateway import requests as checks
from llmrelay.gateway.asgi import read_body, send_json, send_sse
from llmrelay.gateway.auth import authenticate
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.capabilities import Needs, expected_tokens, needs_of, price_of
from llmrelay.gateway.errors import ClientDisconnected, GatewayError, UpstreamTimeout
from llmrelay.gateway.executor import Executor, Finisher, UpstreamRejected, candidates
from llmrelay.gateway.ingress import RequestContext
from llmrelay.gateway.planner import serve
from llmrelay.gateway.recorder import Recorder
from llmrelay.gateway.relay import ChatStreamRelay
from llmrelay.gateway.watch import ClientWatches
from llmrelay.observability.metrics import Metrics
from llmrelay.protocols import openai as wire
from llmrelay.providers.base import Operation, UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.providers.headers import forwardable
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.model import KeySnap, ModelSnap, PolicySnap, RouteSnap, Snapshot

Handler = Callable[[Scope, Receive, Send, RequestContext], Awaitable[None]]


@dataclass(slots=True)
class Runtime:
    """What handlers share, built once at start-up (see app.py)."""

    snapshots: SnapshotHolder
    executor: Executor
    recorder: Recorder
    metrics: Metrics
    max_body_bytes: int
    client_watches: ClientWatches
    deadlines: Deadlines


class DataPlane:
    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self._renames: dict[str, wire.ModelRename] = {}

    def handlers(self) -> dict[tuple[str, str], Handler]:
        """(method, path) -> handler, for the app's direct dispatch (partials: no wrapper
        coroutine per call)."""
        return {
            ("POST", "/v1/chat/completions"): partial(self.model_call, operation=Operation.CHAT),
            ("POST", "/v1/embeddings"): partial(self.model_call, operation=Operation.EMBEDDINGS),
            ("GET", "/v1/models"): self.list_models,
        }

    # -- endpoints ---------------------------------------------------------------------

    async def list_models(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        runtime = self._runtime()
        id_header = (b"x-request-id", context.request_id.encode())
        try:
            snapshot = runtime.snapshots.current
            principal = authenticate(scope["headers"], snapshot, context.client_ip, time.time())
        except GatewayError as error:
            body = wire.error_body(error, context.request_id)
            await send_json(send, error.status, body, (id_header,))
            return
        models = [
            {"id": m.name, "object": "model", "created": m.created, "owned_by": "llmrelay"}
            for m in sorted(snapshot.tenant_models(principal.tenant_id).values(), key=_name)
            if principal.allows_model(m.name)
            and (principal.policy is None or checks.policy_reaches(principal.policy, m))
        ]
        body = orjson.dumps({"object": "list", "data": models})
        await send_json(send, 200, body, (id_header,))

    # -- the model call ------------------------------------------------------------------

    async def model_call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        context: RequestContext,
        operation: Operation,
    ) -> None:
        runtime = self._runtime()
        record = CallRecord(context.request_id, _ENDPOINTS[operation], context.started)
        headers = [(b"x-request-id", context.request_id.encode())]
        streaming = False
        try:
            snapshot = runtime.snapshots.current
            principal = authenticate(scope["headers"], snapshot, context.client_ip, time.time())
            _bind(record, principal)
            payload = checks.parse_object(await read_body(receive, runtime.max_body_bytes))
            if operation is Operation.CHAT:
                checks.check_chat(payload)
            else:
                checks.check_embeddings(payload)
            model, pinned = checks.resolve_model(
                snapshot, principal, payload["model"], embedding=operation is Operation.EMBEDDINGS
            )
            record.virtual_model = model.name
            needs = None
            if operation is Operation.CHAT and (
                model.capability_aware or model.fallbacks or model.context_fallbacks
            ):
                needs = needs_of(payload)
            forwarded = forwardable(scope["headers"])
            forwarded["x-request-id"] = context.request_id  # correlates provider-side logs
            call = _Call(
                runtime,
                operation,
                payload,
                forwarded,
                record,
                context.route_tag,
                context.session_id,
                principal.policy,
                needs,
            )
            if operation is Operation.CHAT and payload.get("stream") is True:
                record.stream = streaming = True
                served, relay = await self._answer(call, receive, snapshot, model, pinned)
                headers.append((b"x-llmrelay-model", served.name.encode()))
                headers.append((b"x-llmrelay-provider", (record.provider or "").encode()))
                await send_sse(receive, send, relay.events(), headers, runtime.client_watches)
                return
            served, answer = await self._answer(call, receive, snapshot, model, pinned)
            body = self.rename(served.name).apply(answer.raw, answer.body)
            record.take_usage(answer.body.get("usage"))
            headers.append((b"x-llmrelay-model", served.name.encode()))
            headers.append((b"x-llmrelay-provider", answer.route.provider.slug.encode()))
            await send_json(send, 200, body, headers)
        except UpstreamRejected as error:
            streaming = False
            record.fail(error.status, error.code)
            await send_json(send, error.status, _rejection_body(error, context.request_id), headers)
        except GatewayError as error:
            streaming = False
            record.fail(error.status, error.code)
            headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
            await send_json(send, error.status, wire.error_body(error, context.request_id), headers)
        except ClientDisconnected:
            streaming = False
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
        finally:
            if not streaming:
                self._finish(record)

    async def _answer(
        self,
        call: _Call,
        receive: Receive,
        snapshot: Snapshot,
        model: ModelSnap,
        pinned: str | None,
    ) -> tuple[ModelSnap, Any]:
        """The model that served and its answer (a read JSON answer, or a primed stream
        relay), within the asked model's overall deadline (it bounds the time until the
        answer starts; a stream then runs under its idle limit)."""
        runtime = call.runtime
        deadline = runtime.deadlines.watch(model.deadline_s, "request")
        deadline_at = runtime.executor.clock() + model.deadline_s
        try:
            with runtime.client_watches.watch(receive):
                if pinned is None and (model.fallbacks or model.context_fallbacks):
                    attempt = partial(self._attempt, call, deadline_at)
                    tenant = call.record.tenant_id or ""
                    served, answer = await serve(
                        snapshot, tenant, model, pinned, attempt, call.policy, call.needs
                    )
                else:
                    routes = candidates(model, pinned, call.policy, call.needs)
                    served = model
                    answer = await self._attempt(call, deadline_at, model, routes)
            if call.session_id is not None and call.record.route_id is not None:
                session = f"{served.id}:{call.session_id}"
                runtime.executor.affinity.remember(session, call.record.route_id)
            return served, answer
        except asyncio.CancelledError:
            if deadline.claim():
                raise UpstreamTimeout(
                    f"no answer within the model's deadline of {model.deadline_s:g}s"
                ) from None
            raise
        finally:
            deadline.stop()

    def _attempt(
        self, call: _Call, deadline_at: float, model: ModelSnap, routes: Sequence[RouteSnap]
    ) -> Awaitable[Any]:
        """Serve from one model's routes (those the key's routing policy allows), in the
        order its strategy gives, or the policy's strategy when it sets one (a plain function
        returning the executor's coroutine: no extra frame per call)."""
        executor = call.runtime.executor
        policy = call.policy
        strategy = None if policy is None else policy.strategy
        if (strategy or model.strategy) == "cost_first":
            ordered = executor.router.order(
                model,
                routes,
                expected_tokens=expected_tokens(call.payload),
                price_of=price_of(model),
                strategy=strategy,
            )
        else:
            ordered = executor.router.order(model, routes, tag=call.route_tag, strategy=strategy)
        if call.session_id is not None and len(ordered) > 1:
            session = f"{model.id}:{call.session_id}"
            ordered = executor.affinity.prefer(session, ordered, _route_id, executor.usable)
        finish = self._stream_primer(call, model) if call.record.stream else _read_json
        return executor.execute(
            call.operation,
            model,
            ordered,
            call.payload,
            call.forwarded,
            call.record,
            finish,
            deadline_at=deadline_at,
            strategy=strategy,
        )

    def _stream_primer(self, call: _Call, model: ModelSnap) -> Finisher[ChatStreamRelay]:
        """The finisher that opens a stream relay for `model` and reads to its first content."""
        runtime = call.runtime
        payload = call.payload
        options = payload.get("stream_options")
        usage_requested = isinstance(options, dict) and options.get("include_usage") is True
        n = payload.get("n") or 1
        record = call.record

        async def prime(route: RouteSnap, response: UpstreamResponse) -> ChatStreamRelay:
            slug = route.provider.slug
            relay = ChatStreamRelay(
                route,
                response,
                request_id=record.request_id,
                choices=n,
                usage_requested=usage_requested,
                record=record,
                rename=self.rename(model.name),
                on_malformed=lambda: runtime.metrics.malformed_events.labels(slug).inc(),
                on_end=self._finish,
            )
            await relay.prime(runtime.deadlines)
            return relay

        return prime

    def _finish(self, record: CallRecord) -> None:
        runtime = self._runtime()
        if record.counted_route is not None:
            runtime.executor.router.in_flight.end(record.counted_route)
        latency_ms = record.latency_ms()
        runtime.recorder.record(record.row(latency_ms), record.attempt_log)
        runtime.metrics.count_request(
            record.endpoint,
            record.virtual_model or "",
            record.provider or "",
            record.status_code,
            latency_ms / 1000.0,
        )

    def rename(self, virtual: str) -> wire.ModelRename:
        """The (cached) renamer for one virtual model's answers."""
        renamer = self._renames.get(virtual)
        if renamer is None:
            if len(self._renames) > 10_000:  # bounded across config reloads
                self._renames.clear()
            renamer = self._renames[virtual] = wire.ModelRename(virtual)
        return renamer

    def _runtime(self) -> Runtime:
        runtime = self.runtime
        if runtime is None:
            raise RuntimeError("the data plane is not started")
        return runtime


_ENDPOINTS = {Operation.CHAT: "chat.completions", Operation.EMBEDDINGS: "embeddings"}


@dataclass(slots=True)
class _Call:
    """One model call's inputs, as the planner's attempts need them."""

    runtime: Runtime
    operation: Operation
    payload: dict[str, Any]
    forwarded: dict[str, str]
    record: CallRecord
    route_tag: str | None
    session_id: str | None
    policy: PolicySnap | None
    #: What the request uses (examined only when a route declares capabilities).
    needs: Needs | None


def _name(model: ModelSnap) -> str:
    return model.name


def _route_id(route: RouteSnap) -> str:
    return route.id


def _bind(record: CallRecord, principal: KeySnap) -> None:
    record.tenant_id = principal.tenant_id
    record.project_id = principal.project.id
    record.key_id = principal.id
    policy = principal.policy
    if policy is not None:
        record.policy_id = policy.id


@dataclass(slots=True)
class _Answer:
    route: RouteSnap
    raw: bytes
    body: dict[str, Any]


async def _read_json(route: RouteSnap, response: UpstreamResponse) -> _Answer:
    raw = await response.read()
    response.release()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError("the answer is not valid JSON") from None
    if not isinstance(body, dict):
        raise UpstreamProtocolError("the answer is not a JSON object")
    return _Answer(route, raw, body)


def _rejection_body(error: UpstreamRejected, request_id: str) -> bytes:
    """The provider's own error body when it is OpenAI-shaped, with our request id added."""
    try:
        body = orjson.loads(error.body)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body["request_id"] = request_id
        return orjson.dumps(body)
    return wire.error_body(error, request_id)

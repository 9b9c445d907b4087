"""Sending one model call to its routes and reading the answer, for every client protocol.

The handlers (endpoints.py for OpenAI's routes, messages.py for Anthropic's, gemini.py for
Gemini's) check and resolve a request, then hand a `ModelCall` to `Dispatcher.answer`: the
model's fallbacks (planner), the strategy's order and the session's route (router, affinity),
the attempts (executor), and the finisher that reads the answer — a JSON body, or a stream
relay primed to its first content in the client's protocol. `finish` queues the record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from time import time as now
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson
from starlette.types import Receive, Send

from llmrelay.billing.estimate import ReservePolicy
from llmrelay.billing.prepaid import Prepaid
from llmrelay.deadlines import Deadlines
from llmrelay.gateway.asgi import send_json
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.capabilities import Needs, expected_tokens, price_of
from llmrelay.gateway.capture import DEFAULT_MAX_BYTES, Capture
from llmrelay.gateway.conversation import (
    RESPONSE_SESSION_PREFIX,
    conversation_of,
    response_session,
)
from llmrelay.gateway.ending import end_call
from llmrelay.gateway.errors import UpstreamTimeout
from llmrelay.gateway.executor import Executor, Finisher, candidates
from llmrelay.gateway.gemini_relay import GeminiStreamRelay
from llmrelay.gateway.guard import screen_answer, screen_request
from llmrelay.gateway.ingress import RequestContext
from llmrelay.gateway.journal import Journal
from llmrelay.gateway.messages_relay import MessagesStreamRelay
from llmrelay.gateway.planner import serve
from llmrelay.gateway.prepaid import budget_hold, reserve
from llmrelay.gateway.recorder import Recorder
from llmrelay.gateway.relay import ChatStreamRelay
from llmrelay.gateway.rescue import rescuing_primer
from llmrelay.gateway.rescue_events import EventTranscript, event_rescue
from llmrelay.gateway.rescue_gemini import GeminiTranscript
from llmrelay.gateway.rescue_messages import MessagesTranscript
from llmrelay.gateway.rescue_responses import ResponsesTranscript
from llmrelay.gateway.responses_relay import ResponsesStreamRelay
from llmrelay.gateway.stream_relay import ParsedEventRelay
from llmrelay.gateway.watch import ClientWatches
from llmrelay.guardrails.policy import Guard
from llmrelay.limits.base import Limiter, Plan
from llmrelay.limits.errors import LimitExceeded, LimitsUnavailable
from llmrelay.limits.estimate import estimate_tokens
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.scopes import ScopeCache
from llmrelay.observability.metrics import Metrics
from llmrelay.observability.tracing import Tracing
from llmrelay.protocols import openai as wire
from llmrelay.providers.base import Operation, UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.providers.headers import CLIENT_REQUEST_ID, forwardable
from llmrelay.providers.presets import account_bound, reports_stream_usage, stores_responses
from llmrelay.providers.translated import TranslatedResponse
from llmrelay.routing.affinity import DEFAULT_TTL_S, binding, prefer, split
from llmrelay.shared.bindings import LocalHomes, ResponseHomes
from llmrelay.shared.conversations import LocalConversations, SharedConversations, as_items
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.model import KeySnap, ModelSnap, PolicySnap, RouteSnap, Snapshot

#: A relay of parsed events (see _event_primer).
R = TypeVar("R", bound=ParsedEventRelay)

if TYPE_CHECKING:
    from llmrelay.gateway.durable import DurableJobs


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
    #: None: no limiter (tests of other parts); the app always has one.
    limiter: Limiter | None = None
    #: The tpm reservation's output part for a request that sets no max tokens.
    default_output_tokens: int = 512
    #: Spans for finished requests, when an OTLP endpoint is configured.
    tracing: Tracing | None = None
    #: False only for benchmarks (LLMRELAY_RECORD_REQUESTS=false): records are not queued.
    record_requests: bool = True
    #: The most of each captured body that is kept (keys with `capture: full`).
    capture_max_bytes: int = DEFAULT_MAX_BYTES
    #: Reservations and settles of prepaid tenants' calls (billing/prepaid.py).
    prepaid: Prepaid | None = None
    #: The most characters of text guardrails screen in one body (LLMRELAY_GUARDRAILS_MAX_CHARS).
    guard_max_chars: int = 1_000_000
    #: The longest a request body may take to arrive (LLMRELAY_BODY_TIMEOUT_S).
    body_timeout_s: float = 60.0
    #: Each ended request's record and lease settle until they are durable (LLMRELAY_JOURNAL).
    journal: Journal | None = None


class ModelCall:
    """One model call's inputs, as the planner's attempts need them. (A plain class: one is
    built per call, and under mypyc a dataclass keeps a Python `__init__`.)"""

    __slots__ = (
        "bound_route",
        "forwarded",
        "needs",
        "operation",
        "payload",
        "plan",
        "policy",
        "prepaid",
        "record",
        "route_tag",
        "runtime",
        "session_id",
    )

    def __init__(
        self,
        runtime: Runtime,
        operation: Operation,
        payload: dict[str, Any],
        forwarded: dict[str, str],
        record: CallRecord,
        route_tag: str | None,
        session_id: str | None,
        policy: PolicySnap | None,
        needs: Needs | None,
        plan: Plan | None = None,
        prepaid: bool = False,
    ) -> None:
        self.runtime = runtime
        self.operation = operation
        self.payload = payload
        self.forwarded = forwarded
        self.record = record
        self.route_tag = route_tag
        self.session_id = session_id
        #: The route its conversation is bound to (sticky routing), once `answer` looked.
        self.bound_route: str | None = None
        self.policy = policy
        #: What the request uses (examined only when a route declares capabilities).
        self.needs = needs
        #: The limits the call is admitted by (None: none apply).
        self.plan = plan
        #: Its tenant is prepaid: the call reserves before any provider call.
        self.prepaid = prepaid


class Dispatcher:
    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self._renames: dict[str, wire.ModelRename] = {}
        #: Response id -> (route id, project id) of Responses a provider stores: this
        #: process's (bounded), or shared by the replicas (shared/bindings.py, set by stack.py).
        self.homes: LocalHomes | ResponseHomes = LocalHomes()
        #: Responses the gateway stores itself (chat-only providers; shared/conversations.py).
        self.conversations: LocalConversations | SharedConversations = LocalConversations()
        self.scopes = ScopeCache()
        #: Background responses and queued generations (jobs/submissions.py, set by
        #: stack.py); None: this process takes none (400 naming the field).
        self.durable: DurableJobs | None = None

    async def answer(
        self,
        call: ModelCall,
        receive: Receive,
        snapshot: Snapshot,
        model: ModelSnap,
        pinned: str | None,
    ) -> tuple[ModelSnap, Any]:
        """The model that served and its answer (a read JSON answer, or a primed stream
        relay), within the asked model's overall deadline (it bounds the time until the
        answer starts; a stream then runs under its idle limit)."""
        runtime = call.runtime
        plan = call.plan
        if plan is not None:
            limiter = runtime.limiter
            if limiter is not None:
                # The token estimate only for a tpm limit (the walk of the prompt costs).
                tokens = (
                    estimate_tokens(call.operation, call.payload, runtime.default_output_tokens)
                    if plan.tpm
                    else 1
                )
                # A budget holds the call's most possible cost until it settles (hard caps).
                hold = (
                    budget_hold(
                        _reserve_policy(runtime),
                        call.record,
                        call.operation,
                        call.payload,
                        snapshot,
                        model,
                        pinned,
                        call.policy,
                    )
                    if plan.budget
                    else 0
                )
                try:
                    if type(limiter) is LocalLimiter:  # it never waits: no coroutine
                        admission = limiter.take(plan, tokens, now(), None, hold)
                    else:
                        admission = await limiter.admit_plan(plan, tokens, now(), None, hold)
                except (LimitExceeded, LimitsUnavailable) as refused:
                    _count_refusal(runtime.metrics, refused)
                    raise
                call.record.admission = admission  # settled by `finish`
        if call.prepaid and call.operation is not _COUNT_TOKENS:
            await reserve(
                runtime.prepaid,
                call.record,
                call.operation,
                call.payload,
                snapshot,
                model,
                pinned,
                call.policy,
            )  # settled by `finish`
        affinity = runtime.executor.affinity
        sticky = self.sticky_key(call, model)
        if sticky is not None:
            call.bound_route = await affinity.bound(sticky)
        deadline = runtime.deadlines.watch(model.deadline_s, "request")
        deadline_at = runtime.executor.clock() + model.deadline_s
        try:
            with runtime.client_watches.watch(receive):
                if pinned is None and (model.fallbacks or model.context_fallbacks):
                    attempt = partial(self.attempt, call, deadline_at)
                    tenant = call.record.tenant_id or ""
                    served, answer = await serve(
                        snapshot, tenant, model, pinned, attempt, call.policy, call.needs
                    )
                else:
                    routes = candidates(model, pinned, call.policy, call.needs)
                    served = model
                    answer = await self.attempt(call, deadline_at, model, routes)
            route_id = call.record.route_id
            if sticky is not None and route_id is not None:
                record = call.record
                kept = record.resource_id if account_bound(record.provider_type or "") else None
                bound = binding(route_id, kept)
                affinity.remember(sticky, bound, model.affinity_ttl_s or DEFAULT_TTL_S)
            return served, answer
        except asyncio.CancelledError:
            if deadline.claim():
                raise UpstreamTimeout(
                    f"no answer within the model's deadline of {model.deadline_s:g}s"
                ) from None
            raise
        finally:
            deadline.stop()

    def sticky_key(self, call: ModelCall, model: ModelSnap) -> str | None:
        """The key of the call's conversation binding for `model`, or None when it has none:
        a model that does not stick (affinity off, or one route) derives nothing, except a
        Responses call continuing `previous_response_id` (the provider holds that one)."""
        session = call.session_id
        if session is not None and session.startswith(RESPONSE_SESSION_PREFIX):
            several = len(model.enabled_routes) > 1 or model.resourced
            return f"{model.id}:{session}" if several else None
        if not model.sticky:
            return None
        conversation = conversation_of(call.operation, call.payload, session, call.record.key_id)
        return None if conversation is None else f"{model.id}:{conversation}"

    def served_headers(
        self, headers: list[tuple[bytes, bytes]], served: ModelSnap, record: CallRecord
    ) -> None:
        """What a successful answer adds: the model and provider that served, and the
        tightest limit's figures (with `X-RateLimit-Degraded` under the local fallback)."""
        headers.append((b"x-llmrelay-model", served.name.encode()))
        headers.append((b"x-llmrelay-provider", (record.provider or "").encode()))
        admission = record.admission
        if admission is not None:
            headers += admission.header_pairs()
            if admission.program.degraded:
                headers.append((b"x-ratelimit-degraded", b"true"))

    def attempt(
        self, call: ModelCall, deadline_at: float, model: ModelSnap, routes: Sequence[RouteSnap]
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
        bound = call.bound_route
        bound_resource: str | None = None
        if bound is not None:
            bound_route, bound_resource = split(bound)
            if len(ordered) > 1:
                ordered = prefer(bound_route, ordered, _route_id, executor.usable)
        finish: Finisher[Any]
        operation = call.operation
        if not call.record.stream:
            finish = read_json
        elif operation is _CHAT:
            finish = self._stream_primer(call, model)
        elif operation is Operation.MESSAGES:
            finish = self._event_primer(call, model, MessagesStreamRelay, MessagesTranscript)
        elif operation is Operation.RESPONSES:
            project_id = call.record.project_id
            remember = partial(self.remember_response, model, project_id)
            keep = None
            if call.payload.get("store") is not False:
                keep = partial(self.keep_response, project_id, call.payload)
            finish = self._event_primer(
                call,
                model,
                ResponsesStreamRelay,
                ResponsesTranscript,
                on_response_id=remember,
                keep=keep,
            )
        elif operation is Operation.GEMINI_STREAM:
            finish = self._event_primer(call, model, GeminiStreamRelay, GeminiTranscript)
        else:
            finish = self._stream_primer(call, model)
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
            bound_resource=bound_resource,
        )

    def _stream_primer(self, call: ModelCall, model: ModelSnap) -> Finisher[ChatStreamRelay]:
        """The finisher that opens a stream relay for `model` and reads to its first content."""
        runtime = call.runtime
        payload = call.payload
        options = payload.get("stream_options")
        usage_requested = isinstance(options, dict) and options.get("include_usage") is True
        n = payload.get("n") or 1
        record = call.record

        if model.stream_rescue and n == 1 and call.operation is _CHAT:
            # Mid-stream rescue (gateway/rescue.py): only when the model opts in.
            return rescuing_primer(
                call, model, self.rename(model.name), usage_requested, self.finish
            )

        async def prime(route: RouteSnap, response: UpstreamResponse) -> ChatStreamRelay:
            provider = route.provider
            slug = provider.slug
            relay = ChatStreamRelay(
                route,
                response,
                request_id=record.request_id,
                choices=n,
                usage_requested=usage_requested,
                usage_coming=reports_stream_usage(provider.type, provider.preset),
                record=record,
                rename=self.rename(model.name),
                on_malformed=lambda: runtime.metrics.malformed_events.labels(slug).inc(),
                on_end=self.finish,
            )
            await relay.prime(runtime.deadlines)
            return relay

        return prime

    def _event_primer(
        self,
        call: ModelCall,
        model: ModelSnap,
        relay: Callable[..., R],
        transcript: Callable[[], EventTranscript] | None,
        **extra: Any,
    ) -> Finisher[R]:
        """The finisher that opens a relay of parsed events (Messages, Responses, Gemini:
        `relay` is its class, `extra` more of its arguments) and reads to its first content.
        For a model with `stream_rescue`, `transcript` makes what reads the events for a
        rescue (gateway/rescue_events.py)."""
        runtime = call.runtime
        record = call.record
        rescue = None
        if transcript is not None and model.stream_rescue:
            rescue = event_rescue(call, model)

        async def prime(route: RouteSnap, response: UpstreamResponse) -> R:
            slug = route.provider.slug
            opened = relay(
                route,
                response,
                request_id=record.request_id,
                virtual_model=model.name,
                record=record,
                on_malformed=lambda: runtime.metrics.malformed_events.labels(slug).inc(),
                on_end=self.finish,
                **extra,
            )
            if rescue is not None and transcript is not None:
                rescue(opened, transcript())
            await opened.prime(runtime.deadlines)
            return opened

        return prime

    def remember_response(
        self, model: ModelSnap, project_id: str | None, route: RouteSnap, response_id: str
    ) -> None:
        """A Response's id -> the route that holds it: a request continuing it
        (`previous_response_id`) goes back there while that route is healthy, and one
        reading or cancelling it is sent there (when that provider stores responses)."""
        executor = self.live().executor
        resource = route.resource if account_bound(route.provider.type) else None
        executor.affinity.remember(
            f"{model.id}:{response_session(response_id)}",
            binding(route.id, None if resource is None else resource.id),
            model.affinity_ttl_s or DEFAULT_TTL_S,
        )
        if stores_responses(route.provider.type, route.provider.preset):
            self.homes.remember(response_id, route.id, project_id)

    def keep_response(
        self,
        project_id: str | None,
        payload: dict[str, Any],
        response_id: str,
        response: dict[str, Any],
    ) -> None:
        """Keep a Response no provider stores (shared/conversations.py): the request's input
        items (the whole conversation when it continued one) and the Response."""
        self.conversations.keep(response_id, (project_id, response, as_items(payload.get("input"))))

    def finish(self, record: CallRecord) -> None:
        if not record.ended:
            record.ended = True
            end_call(self.live(), record)

    async def answer_json(
        self,
        send: Send,
        record: CallRecord,
        status: int,
        body: bytes,
        headers: Iterable[tuple[bytes, bytes]],
    ) -> None:
        """A call's answer, sent after its end: the record (and the prepaid settle) is
        queued and in the journal before the client can have the answer, so a process
        killed while it sends (kill -9, the OOM killer) cannot have served an answer it
        did not record (tests/e2e/test_replicas_money.py, a replica killed under load).
        The capture, when the key keeps bodies, takes the answer before it is sent."""
        capture = record.capture
        if capture is not None:
            capture.answered(body)
        self.finish(record)
        await send_json(send, status, body, headers)

    def screen_answer(
        self, guard: Guard, operation: Operation, answer: dict[str, Any], record: CallRecord
    ) -> bool:
        """A non-streamed answer through the key's guardrails (only for a guard that screens
        answers): True when its text was masked. Raises InvalidRequest when withheld."""
        runtime = self.live()
        return screen_answer(
            guard, operation, answer, record, runtime.metrics, runtime.guard_max_chars
        )

    def screen(
        self, principal: KeySnap, operation: str, payload: dict[str, Any], record: CallRecord
    ) -> None:
        """The key's guardrails over a request body (gateway/guard.py): they may mask
        `payload` in place or refuse it (InvalidRequest, PayloadTooLarge). Every path to a
        provider passes here before anything is admitted, queued or sent: a served call
        (`call`), a background response or queued generation at submission, before its
        body is stored, and the job's call again when it runs (gateway/headless.py), and a
        token count the gateway answers with its own estimate. `operation` names the body's
        shape (guardrails/fields.py REQUEST_WALKERS)."""
        guard = principal.guard
        if guard is not None:
            runtime = self.live()
            screen_request(
                guard, operation, payload, record, runtime.metrics, runtime.guard_max_chars
            )

    def capture(self, record: CallRecord, send: Send, receive: Receive) -> tuple[Send, Receive]:
        """Keep this request's bodies (its key captures them): `send` and `receive` to use
        from here on. Called right after authentication, so the gateway's own error answers
        are kept too."""
        capture = record.capture = Capture(self.live().capture_max_bytes)
        return capture.wrap(send, receive)

    def rename(self, virtual: str) -> wire.ModelRename:
        """The (cached) renamer for one virtual model's answers."""
        renamer = self._renames.get(virtual)
        if renamer is None:
            if len(self._renames) > 10_000:  # bounded across config reloads
                self._renames.clear()
            renamer = self._renames[virtual] = wire.ModelRename(virtual)
        return renamer

    def call(
        self,
        operation: Operation,
        payload: dict[str, Any],
        headers: Iterable[tuple[bytes, bytes]],
        record: CallRecord,
        context: RequestContext,
        principal: KeySnap,
        needs: Needs | None = None,
        session_id: str | None = None,
    ) -> ModelCall:
        """One call's inputs: the client headers a provider may see, with our request id
        under its own header (it correlates provider-side logs; providers/headers.py says
        why not as `x-request-id`), and the session (the client's, unless given).
        The key's guardrails run here (`screen`), before the call is admitted."""
        self.screen(principal, operation, payload, record)
        forwarded = forwardable(headers)
        forwarded[CLIENT_REQUEST_ID] = context.request_id
        record.payload = payload
        return ModelCall(
            self.live(),
            operation,
            payload,
            forwarded,
            record,
            context.route_tag,
            session_id if session_id is not None else context.session_id,
            principal.policy,
            needs,
            None if operation is _COUNT_TOKENS else self.scopes.of(principal),
            principal.prepaid,
        )

    def live(self) -> Runtime:
        runtime = self.runtime
        if runtime is None:
            raise RuntimeError("the data plane is not started")
        return runtime


def bind(record: CallRecord, principal: KeySnap) -> None:
    record.tenant_id = principal.tenant_id
    record.project_id = principal.project.id
    record.key_id = principal.id
    policy = principal.policy
    if policy is not None:
        record.policy_id = policy.id


class Answer:
    """A JSON answer: its bytes and their parse."""

    __slots__ = ("body", "raw", "route")

    def __init__(self, route: RouteSnap, raw: bytes, body: dict[str, Any]) -> None:
        self.route = route
        self.raw = raw
        self.body = body


async def read_json(route: RouteSnap, response: UpstreamResponse) -> Answer:
    raw = await response.read()
    response.release()
    if type(response) is TranslatedResponse and response.completion is not None:
        return Answer(route, raw, response.completion)  # parsed already: it wrote `raw`
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError("the answer is not valid JSON") from None
    if not isinstance(body, dict):
        raise UpstreamProtocolError("the answer is not a JSON object")
    return Answer(route, raw, body)


#: The estimate budgets hold with when the process has no prepaid billing (its defaults).
_DEFAULT_RESERVE: Final = ReservePolicy()


def _reserve_policy(runtime: Runtime) -> ReservePolicy:
    prepaid = runtime.prepaid
    return _DEFAULT_RESERVE if prepaid is None else prepaid.policy


def _count_refusal(metrics: Metrics, refused: LimitExceeded | LimitsUnavailable) -> None:
    if isinstance(refused, LimitExceeded):
        metrics.limits_refused.labels(refused.quota.kind, refused.quota.scope).inc()
    else:
        metrics.limits_refused.labels("unavailable", "").inc()


def _route_id(route: RouteSnap) -> str:
    return route.id


#: Looked up once (an enum member read from its class costs a microsecond).
_COUNT_TOKENS: Final = Operation.COUNT_TOKENS
_CHAT: Final = Operation.CHAT

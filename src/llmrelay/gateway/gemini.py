"""Gemini's routes (the `gemini-native` API): everything under `/v1beta/`.

    POST /v1beta/models/MODEL:generateContent
    POST /v1beta/models/MODEL:streamGenerateContent    (`?alt=sse`: events; else a JSON array)
    POST /v1beta/models/MODEL:countTokens
    POST /v1beta/models/MODEL:embedContent, :batchEmbedContents
    GET  /v1beta/models, /v1beta/models/MODEL

MODEL is a virtual model (`MODEL:PROVIDER` pins, as everywhere). A request goes to the same
routes as a chat request for the same model, with the same keys, limits, guardrails, metering
and records: a gemini provider gets the body as it came (only the model in the URL changed),
the others get it through chat (providers.gemini_bridge). The key comes in `x-goog-api-key`,
`?key=`, `Authorization: Bearer` or `x-api-key`. Every answer, errors and unknown paths under
/v1beta included, is in Google's shape: `{"error": {"code", "message", "status", "details"}}`
with the status the other routes would give (protocols.gemini_models).
"""

from __future__ import annotations

import time
from typing import Any, Final
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay import apikeys
from llmrelay.gateway import requests as checks
from llmrelay.gateway.asgi import JSON_TYPE, read_body, send_json, send_sse
from llmrelay.gateway.auth import gemini_key, principal_of
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.capabilities import CHARS_PER_TOKEN, Needs
from llmrelay.gateway.dispatch import Dispatcher, bind
from llmrelay.gateway.errors import (
    AuthenticationFailed,
    ClientDisconnected,
    GatewayError,
    InvalidRequest,
    NotFound,
)
from llmrelay.gateway.executor import UpstreamRejected, candidates
from llmrelay.gateway.ingress import RequestContext
from llmrelay.metering.estimate import answer_tokens
from llmrelay.protocols import gemini, gemini_models
from llmrelay.protocols.gemini_chat import field
from llmrelay.providers.base import Operation
from llmrelay.snapshot.model import KeySnap, ModelSnap, Snapshot

#: Every path of the API (dispatched by prefix: an unknown one gets Google's 404 here).
GEMINI_PREFIX: Final = "/v1beta/"
#: What these routes are called where a key's scopes name APIs: every path under
#: GEMINI_PREFIX, every record whose endpoint starts with "gemini.".
SCOPE: Final = apikeys.GEMINI_NATIVE
MODELS_PATH: Final = "/v1beta/models"
_MODEL_PREFIX: Final = "/v1beta/models/"
#: The client's method -> (operation, record endpoint).
_METHODS: Final = {
    "generateContent": (Operation.GEMINI_GENERATE, "gemini.generate_content"),
    "streamGenerateContent": (Operation.GEMINI_STREAM, "gemini.generate_content"),
    "countTokens": (Operation.GEMINI_COUNT_TOKENS, "gemini.count_tokens"),
    "embedContent": (Operation.GEMINI_EMBED, "gemini.embed_content"),
    "batchEmbedContents": (Operation.GEMINI_BATCH_EMBED, "gemini.batch_embed_contents"),
}
_EMBEDDING: Final = frozenset({Operation.GEMINI_EMBED, Operation.GEMINI_BATCH_EMBED})
_ARRAY_HEAD: Final = (JSON_TYPE, (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"))
_IMAGE_KEYS: Final = ("inlineData", "inline_data", "fileData", "file_data")


class GeminiRoutes:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    async def by_path(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        """Any path under /v1beta/: a model's method, a model, or Google's 404."""
        path = str(scope["path"])
        method = scope.get("method", "")
        rest = path[len(_MODEL_PREFIX) :] if path.startswith(_MODEL_PREFIX) else None
        if rest and ":" in rest:
            name, verb = rest.rsplit(":", 1)
            found = _METHODS.get(verb)
            if found is None:
                error: GatewayError = NotFound(f"method {verb!r} is not served by llmrelay")
            elif method != "POST":
                error = _not_allowed(method, path)
            else:
                await self._call(scope, receive, send, context, name, *found)
                return
        elif rest and "/" not in rest:
            if method == "GET":
                await self.get_model(scope, send, context, rest)
                return
            error = _not_allowed(method, path)
        else:
            error = NotFound(f"no route for {method} {path}")
        headers = [(b"x-request-id", context.request_id.encode())]
        await _send_error(send, error, context.request_id, headers)

    def _principal(
        self, scope: Scope, query: dict[str, str], snapshot: Snapshot, context: RequestContext
    ) -> KeySnap:
        key = gemini_key(scope["headers"], query)
        if key is None:
            raise AuthenticationFailed(
                "no API key: send 'x-goog-api-key: KEY' (or ?key=KEY, or "
                "'Authorization: Bearer KEY')"
            )
        return principal_of(key, snapshot, context.client_ip, time.time(), SCOPE)

    # -- the model list ------------------------------------------------------------------

    async def list_models(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        """The virtual models this key may use, as Gemini's `{"models": [...]}` (one page)."""
        headers = [(b"x-request-id", context.request_id.encode())]
        try:
            snapshot = self._dispatcher.live().snapshots.current
            principal = self._principal(scope, query_of(scope), snapshot, context)
        except GatewayError as error:
            await _send_error(send, error, context.request_id, headers)
            return
        models = [_resource(m) for m in _visible(snapshot, principal)]
        await send_json(send, 200, orjson.dumps({"models": models}), headers)

    async def get_model(self, scope: Scope, send: Send, context: RequestContext, name: str) -> None:
        headers = [(b"x-request-id", context.request_id.encode())]
        try:
            snapshot = self._dispatcher.live().snapshots.current
            principal = self._principal(scope, query_of(scope), snapshot, context)
            model = next((m for m in _visible(snapshot, principal) if m.name == name), None)
            if model is None:
                raise NotFound(f"model {name!r} does not exist", code="model_not_found")
        except GatewayError as error:
            await _send_error(send, error, context.request_id, headers)
            return
        await send_json(send, 200, orjson.dumps(_resource(model)), headers)

    # -- the model call ------------------------------------------------------------------

    async def _call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        context: RequestContext,
        name: str,
        operation: Operation,
        endpoint: str,
    ) -> None:
        dispatcher = self._dispatcher
        runtime = dispatcher.live()
        record = CallRecord(
            context.request_id, endpoint, context.started, context.client_ip, context.user_agent
        )
        headers = [(b"x-request-id", context.request_id.encode())]
        streaming = False
        query = query_of(scope)
        try:
            snapshot = runtime.snapshots.current
            principal = self._principal(scope, query, snapshot, context)
            bind(record, principal)
            if principal.capture:
                send, receive = dispatcher.capture(record, send, receive)
            payload = checks.parse_object(
                await read_body(
                    receive, runtime.max_body_bytes, runtime.body_timeout_s, runtime.deadlines
                )
            )
            check_gemini(payload, operation)
            embedding = operation in _EMBEDDING
            model, pinned = checks.resolve_model(
                snapshot, principal, name.removeprefix("models/"), embedding=embedding
            )
            record.virtual_model = model.name
            counting = operation is Operation.GEMINI_COUNT_TOKENS
            if counting and not _gemini_routes(model, pinned):
                # No provider to ask: the gateway's own estimate, flagged as one, of a body
                # screened as any other (a block refuses it; a mask counts the masked text).
                dispatcher.screen(principal, operation, payload, record)
                body = orjson.dumps({"totalTokens": estimate_tokens(payload)})
                headers.append((b"x-llmrelay-estimated", b"true"))
                await dispatcher.answer_json(send, record, 200, body, headers)
                return
            stream = operation is Operation.GEMINI_STREAM
            needs = None
            if not counting and (
                model.capability_aware or model.fallbacks or model.context_fallbacks
            ):
                needs = needs_of(payload, stream=stream)
            call = dispatcher.call(
                operation, payload, scope["headers"], record, context, principal, needs=needs
            )
            if stream:
                record.stream = streaming = True
                served, relay = await dispatcher.answer(call, receive, snapshot, model, pinned)
                dispatcher.served_headers(headers, served, record)
                head = None
                if query.get("alt") != "sse":
                    relay.as_array()  # Google's default framing: one JSON array
                    head = _ARRAY_HEAD
                await send_sse(receive, send, relay, headers, runtime.client_watches, head, scope)
                return
            served, answer = await dispatcher.answer(call, receive, snapshot, model, pinned)
            answered = answer.body
            if not counting:
                self._take_answer(answered, served, record, operation, principal)
            dispatcher.served_headers(headers, served, record)
            await dispatcher.answer_json(send, record, 200, orjson.dumps(answered), headers)
        except UpstreamRejected as rejected:
            streaming = False
            record.fail(rejected.status, rejected.code)
            body = _rejection_body(rejected, record)
            await dispatcher.answer_json(send, record, rejected.status, body, headers)
        except GatewayError as error:
            streaming = False
            record.fail(error.status, error.code)
            body = _error_body(error, context.request_id, headers)
            await dispatcher.answer_json(send, record, error.status, body, headers)
        except ClientDisconnected:
            streaming = False
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
        finally:
            if not streaming:
                dispatcher.finish(record)

    def _take_answer(
        self,
        answered: dict[str, Any],
        served: ModelSnap,
        record: CallRecord,
        operation: Operation,
        principal: KeySnap,
    ) -> None:
        """A non-streamed answer: its usage into the record, its model renamed, the key's
        guardrails over its text."""
        metadata = answered.get("usageMetadata")
        if isinstance(metadata, dict):
            record.take_usage(gemini.chat_usage(metadata))
        if record.usage is None and operation not in _EMBEDDING:
            record.answer_tokens = answer_tokens(answered)
        if "modelVersion" in answered or operation is Operation.GEMINI_GENERATE:
            answered["modelVersion"] = served.name
        guard = principal.guard
        if guard is not None and guard.responses:
            self._dispatcher.screen_answer(guard, operation, answered, record)


def check_gemini(payload: dict[str, Any], operation: Operation) -> None:
    """What the gateway needs of a Gemini request, worded like Google's own errors."""
    if operation is Operation.GEMINI_EMBED:
        if not isinstance(payload.get("content"), dict):
            raise InvalidRequest("* EmbedContentRequest.content: content is not specified")
        return
    if operation is Operation.GEMINI_BATCH_EMBED:
        requests = payload.get("requests")
        if not isinstance(requests, list) or not requests:
            raise InvalidRequest("* BatchEmbedContentsRequest.requests: requests is not specified")
        return
    if operation is Operation.GEMINI_COUNT_TOKENS and field(payload, "generateContentRequest"):
        return
    contents = payload.get("contents")
    if not isinstance(contents, list) or not contents:
        raise InvalidRequest("* GenerateContentRequest.contents: contents is not specified")
    if not all(isinstance(c, dict) for c in contents):
        raise InvalidRequest("* GenerateContentRequest.contents: each content must be an object")


def estimate_tokens(payload: dict[str, Any]) -> int:
    """About four characters a token over the request's text (contents, system instruction,
    tools): for providers that cannot count Gemini tokens."""
    inner = field(payload, "generateContentRequest")
    if isinstance(inner, dict):
        payload = inner
    chars = len(orjson.dumps(payload.get("contents") or []))
    chars += len(orjson.dumps(field(payload, "systemInstruction") or ""))
    chars += len(orjson.dumps(payload.get("tools") or []))
    return max(1, chars // CHARS_PER_TOKEN)


def needs_of(payload: dict[str, Any], *, stream: bool) -> Needs:
    """What a generateContent request uses, for capability-aware routes."""
    chars = 0
    images = False
    for content in payload.get("contents") or []:
        for part in content.get("parts") or [] if isinstance(content, dict) else []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                chars += len(part["text"])
            for key in _IMAGE_KEYS:
                data = part.get(key)
                mime = field(data, "mimeType") if isinstance(data, dict) else None
                images = images or (isinstance(mime, str) and mime.startswith("image/"))
    config = field(payload, "generationConfig")
    schema = isinstance(config, dict) and (
        field(config, "responseSchema") is not None
        or field(config, "responseJsonSchema") is not None
    )
    tools = any(
        isinstance(t, dict) and field(t, "functionDeclarations") for t in payload.get("tools") or []
    )
    return Needs(
        tools=tools,
        images=images,
        json_schema=schema,
        streaming=stream,
        prompt_tokens=chars // CHARS_PER_TOKEN,
    )


def query_of(scope: Scope) -> dict[str, str]:
    """The query string's parameters (`key`, `alt`; the last of a repeated one)."""
    raw = scope.get("query_string", b"")
    return dict(parse_qsl(raw.decode("latin-1"))) if raw else {}


def _gemini_routes(model: ModelSnap, pinned: str | None) -> bool:
    return any(r.provider.type == "gemini" for r in candidates(model, pinned))


def _visible(snapshot: Snapshot, principal: KeySnap) -> list[ModelSnap]:
    return [
        m
        for m in sorted(snapshot.tenant_models(principal.tenant_id).values(), key=_name)
        if principal.allows_model(m.name)
        and (principal.policy is None or checks.policy_reaches(principal.policy, m))
    ]


def _name(model: ModelSnap) -> str:
    return model.name


def _resource(model: ModelSnap) -> dict[str, Any]:
    windows = [
        r.capabilities.context_window
        for r in model.enabled_routes
        if r.capabilities is not None and r.capabilities.context_window is not None
    ]
    return gemini_models.model_resource(
        model.name,
        embedding=model.embedding,
        input_limit=min(windows) if windows else None,
        created=model.created,
    )


def _not_allowed(method: str, path: str) -> GatewayError:
    error = GatewayError(f"{method} is not allowed on {path}", code="method_not_allowed")
    error.status = 405
    return error


async def _send_error(
    send: Send, error: GatewayError, request_id: str, headers: list[tuple[bytes, bytes]]
) -> None:
    await send_json(send, error.status, _error_body(error, request_id, headers), headers)


def _error_body(error: GatewayError, request_id: str, headers: list[tuple[bytes, bytes]]) -> bytes:
    """Google's error shape for `error`; its headers (Retry-After) added to `headers`."""
    retry_after = error.headers.get("Retry-After")
    headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
    return gemini_models.error_body(
        error.status,
        error.message,
        reason=error.code,
        request_id=request_id,
        retry_after=retry_after,
    )


def _rejection_body(error: UpstreamRejected, record: CallRecord) -> bytes:
    """A Gemini provider's own error body as it came (the client reads Google's error
    there); any other provider's message in Google's shape."""
    try:
        body = orjson.loads(error.body)
    except orjson.JSONDecodeError:
        body = None
    if record.provider_type == "gemini" and gemini_models.is_google_error(body):
        return error.body
    return gemini_models.error_body(
        error.status, error.message, reason=error.code, request_id=record.request_id
    )

"""OpenAI's `/v1/*` handlers: plain functions over (scope, receive, send, context), the
snapshot and the shared runtime (Anthropic's are in messages.py, Gemini's in gemini.py).

Each request: authenticate from the snapshot, parse the body once, resolve the model,
send to the first route that answers (dispatch.py), pass the answer through with `model`
renamed to the virtual model, and queue one record. Errors are rendered in one place
(`model_call`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Final

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay import apikeys
from llmrelay.gateway import requests as checks
from llmrelay.gateway.asgi import read_body, send_json, send_sse
from llmrelay.gateway.auth import authenticate
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.capabilities import needs_of
from llmrelay.gateway.dispatch import Dispatcher, Runtime, bind
from llmrelay.gateway.entry import Handler
from llmrelay.gateway.errors import ClientDisconnected, GatewayError
from llmrelay.gateway.executor import UpstreamRejected
from llmrelay.gateway.gemini import GEMINI_PREFIX, MODELS_PATH, GeminiRoutes
from llmrelay.gateway.generate import GENERATE_PREFIX, GenerateRoutes
from llmrelay.gateway.ingress import RequestContext
from llmrelay.gateway.messages import MessagesRoutes
from llmrelay.gateway.responses import ResponsesRoutes
from llmrelay.gateway.responses_stored import RESPONSES_PREFIX, StoredResponses
from llmrelay.metering.estimate import answer_tokens
from llmrelay.protocols import anthropic_models as anthropic_wire
from llmrelay.protocols import openai as wire
from llmrelay.providers.base import Operation
from llmrelay.snapshot.model import ModelSnap

__all__ = ["DataPlane", "Handler", "Runtime"]


class DataPlane(Dispatcher):
    """OpenAI's routes: chat completions, embeddings, image generations, the model list (and
    llmrelay's own /v1/generate)."""

    def handlers(self) -> dict[tuple[str, str], Handler]:
        """(method, path) -> handler, for the app's direct dispatch."""
        anthropic = MessagesRoutes(self)
        responses = ResponsesRoutes(self)
        stored = StoredResponses(self)
        generate = GenerateRoutes(self)
        gemini = GeminiRoutes(self)
        return {
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("POST", "/v1/embeddings"): self.embeddings,
            ("POST", "/v1/images/generations"): self.images,
            ("GET", "/v1/models"): self.list_models,
            ("POST", "/v1/messages"): anthropic.messages,
            ("POST", "/v1/messages/count_tokens"): anthropic.count_tokens,
            ("POST", "/v1/responses"): responses.create,
            ("POST", "/v1/responses/compact"): stored.compact,
            ("POST", "/v1/generate"): generate.create,
            ("GET", MODELS_PATH): gemini.list_models,
        }

    def prefixed(self) -> dict[str, Handler]:
        """Path prefix -> handler, for paths with an id in them (tried after `handlers`)."""
        return {
            RESPONSES_PREFIX: StoredResponses(self).by_id,
            GENERATE_PREFIX: GenerateRoutes(self).by_id,
            # Gemini's API: every other path under /v1beta/ (models' methods, unknown ones).
            GEMINI_PREFIX: GeminiRoutes(self).by_path,
        }

    # -- endpoints ---------------------------------------------------------------------

    async def list_models(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        """OpenAI's list; Anthropic's (and its error shape) when the client sends an
        `anthropic-version` header, as Anthropic's SDKs do."""
        runtime = self.live()
        id_header = (b"x-request-id", context.request_id.encode())
        anthropic_client = any(name == b"anthropic-version" for name, _ in scope["headers"])
        try:
            snapshot = runtime.snapshots.current
            principal = authenticate(
                scope["headers"], snapshot, context.client_ip, time.time(), apikeys.MODELS
            )
        except GatewayError as error:
            if anthropic_client:
                body = anthropic_wire.error_body(error, context.request_id)
            else:
                body = wire.error_body(error, context.request_id)
            await send_json(send, error.status, body, (id_header,))
            return
        models = [
            m
            for m in sorted(snapshot.tenant_models(principal.tenant_id).values(), key=_name)
            if principal.allows_model(m.name)
            and (principal.policy is None or checks.policy_reaches(principal.policy, m))
        ]
        if anthropic_client:
            body = orjson.dumps(anthropic_wire.model_list(models))
        else:
            listed = [
                {"id": m.name, "object": "model", "created": m.created, "owned_by": "llmrelay"}
                for m in models
            ]
            body = orjson.dumps({"object": "list", "data": listed})
        await send_json(send, 200, body, (id_header,))

    # -- the model call ------------------------------------------------------------------

    def chat_completions(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> Awaitable[None]:
        """(Not a partial with a keyword: compiled, this is a direct call.)"""
        return self.model_call(scope, receive, send, context, _CHAT)

    def embeddings(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> Awaitable[None]:
        return self.model_call(scope, receive, send, context, _EMBEDDINGS)

    def images(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> Awaitable[None]:
        return self.model_call(scope, receive, send, context, _IMAGES)

    async def model_call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        context: RequestContext,
        operation: Operation,
    ) -> None:
        runtime = self.live()
        record = CallRecord(
            context.request_id,
            _ENDPOINTS[operation],
            context.started,
            context.client_ip,
            context.user_agent,
        )
        headers = [(b"x-request-id", context.request_id.encode())]
        streaming = False
        try:
            snapshot = runtime.snapshots.current
            principal = authenticate(
                scope["headers"], snapshot, context.client_ip, time.time(), _SCOPES[operation]
            )
            bind(record, principal)
            if principal.capture:
                send, receive = self.capture(record, send, receive)
            payload = checks.parse_object(
                await read_body(
                    receive, runtime.max_body_bytes, runtime.body_timeout_s, runtime.deadlines
                )
            )
            if operation is Operation.CHAT:
                checks.check_chat(payload)
            elif operation is _IMAGES:
                checks.check_images(payload)
            else:
                checks.check_embeddings(payload)
            model, pinned = checks.resolve_model(
                snapshot,
                principal,
                payload["model"],
                embedding=operation is Operation.EMBEDDINGS,
                image=operation is _IMAGES,
            )
            record.virtual_model = model.name
            needs = None
            if operation is Operation.CHAT and (
                model.capability_aware or model.fallbacks or model.context_fallbacks
            ):
                needs = needs_of(payload)
            call = self.call(
                operation, payload, scope["headers"], record, context, principal, needs=needs
            )
            if operation is Operation.CHAT and payload.get("stream") is True:
                record.stream = streaming = True
                served, relay = await self.answer(call, receive, snapshot, model, pinned)
                self.served_headers(headers, served, record)
                await send_sse(receive, send, relay, headers, runtime.client_watches, scope=scope)
                return
            served, answer = await self.answer(call, receive, snapshot, model, pinned)
            if operation is _IMAGES:  # input and output tokens, as the Responses API counts
                record.take_responses_usage(answer.body.get("usage"))
            else:
                record.take_usage(answer.body.get("usage"))
            if record.usage is None:
                record.answer_tokens = answer_tokens(answer.body)
            guard = principal.guard
            if (
                guard is not None
                and guard.responses
                and self.screen_answer(guard, operation, answer.body, record)
            ):
                answer.raw = orjson.dumps(answer.body)
            body = self.rename(served.name).apply(answer.raw, answer.body)
            self.served_headers(headers, served, record)
            await self.answer_json(send, record, 200, body, headers)
        except UpstreamRejected as rejected:
            streaming = False
            record.fail(rejected.status, rejected.code)
            body = _rejection_body(rejected, context.request_id)
            await self.answer_json(send, record, rejected.status, body, headers)
        except GatewayError as error:
            streaming = False
            record.fail(error.status, error.code)
            headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
            body = wire.error_body(error, context.request_id)
            await self.answer_json(send, record, error.status, body, headers)
        except ClientDisconnected:
            streaming = False
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
        finally:
            if not streaming:
                self.finish(record)


_ENDPOINTS: Final = {
    Operation.CHAT: "chat.completions",
    Operation.EMBEDDINGS: "embeddings",
    Operation.IMAGES: "images.generations",
}
#: The key scope each operation needs (apikeys.SCOPES).
_SCOPES: Final = {
    Operation.CHAT: apikeys.CHAT,
    Operation.EMBEDDINGS: apikeys.EMBEDDINGS,
    Operation.IMAGES: apikeys.IMAGES,
}
_CHAT: Final = Operation.CHAT
_EMBEDDINGS: Final = Operation.EMBEDDINGS
_IMAGES: Final = Operation.IMAGES


def _name(model: ModelSnap) -> str:
    return model.name


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

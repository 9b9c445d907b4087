"""Anthropic's routes: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

A Messages request goes to the same routes as a chat request for the same model. An
anthropic provider gets the body as it came (only `model` rewritten; `anthropic-version` and
`anthropic-beta` passed on); other providers get it through chat (providers.messages_bridge).
A translated answer names the request's fields it left out in `x-llmrelay-dropped`
(gateway/dropped.py). Every answer, errors included, is in Anthropic's shape:
`{"type":"error","error":{"type","message"},"request_id"}` with the status the OpenAI routes
would give.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay import apikeys
from llmrelay.gateway import requests as checks
from llmrelay.gateway.asgi import read_body, send_sse
from llmrelay.gateway.auth import authenticate
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.capabilities import CHARS_PER_TOKEN, needs_of
from llmrelay.gateway.dispatch import Dispatcher, bind
from llmrelay.gateway.dropped import add_header
from llmrelay.gateway.errors import ClientDisconnected, GatewayError, InvalidRequest
from llmrelay.gateway.executor import UpstreamRejected, candidates
from llmrelay.gateway.ingress import RequestContext
from llmrelay.metering.estimate import answer_tokens
from llmrelay.protocols.anthropic_models import error_body
from llmrelay.providers.base import Operation


class MessagesRoutes:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    async def messages(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        await self._call(scope, receive, send, context, Operation.MESSAGES)

    async def count_tokens(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        await self._call(scope, receive, send, context, Operation.COUNT_TOKENS)

    async def _call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        context: RequestContext,
        operation: Operation,
    ) -> None:
        dispatcher = self._dispatcher
        runtime = dispatcher.live()
        counting = operation is Operation.COUNT_TOKENS
        endpoint = "messages.count_tokens" if counting else "messages"
        record = CallRecord(
            context.request_id, endpoint, context.started, context.client_ip, context.user_agent
        )
        headers = [(b"x-request-id", context.request_id.encode())]
        streaming = False
        try:
            snapshot = runtime.snapshots.current
            principal = authenticate(
                scope["headers"], snapshot, context.client_ip, time.time(), apikeys.MESSAGES
            )
            bind(record, principal)
            if principal.capture:
                send, receive = dispatcher.capture(record, send, receive)
            payload = checks.parse_object(
                await read_body(
                    receive, runtime.max_body_bytes, runtime.body_timeout_s, runtime.deadlines
                )
            )
            check_messages(payload, counting=counting)
            model, pinned = checks.resolve_model(
                snapshot, principal, payload["model"], embedding=False
            )
            record.virtual_model = model.name
            if counting and not _anthropic_routes(model, pinned):
                # No provider to ask: the gateway's own estimate, flagged as one, of a body
                # screened as any other (a block refuses it; a mask counts the masked text).
                dispatcher.screen(principal, operation, payload, record)
                body = orjson.dumps({"input_tokens": estimate_tokens(payload)})
                headers.append((b"x-llmrelay-estimated", b"true"))
                await dispatcher.answer_json(send, record, 200, body, headers)
                return
            needs = None
            if not counting and (
                model.capability_aware or model.fallbacks or model.context_fallbacks
            ):
                needs = needs_of(payload)
            call = dispatcher.call(
                operation, payload, scope["headers"], record, context, principal, needs=needs
            )
            if payload.get("stream") is True and not counting:
                record.stream = streaming = True
                served, relay = await dispatcher.answer(call, receive, snapshot, model, pinned)
                dispatcher.served_headers(headers, served, record)
                add_header(headers, record.dropped)
                await send_sse(receive, send, relay, headers, runtime.client_watches, scope=scope)
                return
            served, answer = await dispatcher.answer(call, receive, snapshot, model, pinned)
            answered = answer.body
            if not counting:
                answered["model"] = served.name
                record.take_messages_usage(answered.get("usage"))
                if record.usage is None:
                    record.answer_tokens = answer_tokens(answered)
                guard = principal.guard
                if guard is not None and guard.responses:
                    dispatcher.screen_answer(guard, operation, answered, record)
            dispatcher.served_headers(headers, served, record)
            add_header(headers, record.dropped)
            await dispatcher.answer_json(send, record, 200, orjson.dumps(answered), headers)
        except GatewayError as error:
            streaming = False
            record.fail(error.status, error.code)
            if not isinstance(error, UpstreamRejected):
                headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
            body = error_body(error, context.request_id)
            await dispatcher.answer_json(send, record, error.status, body, headers)
        except ClientDisconnected:
            streaming = False
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
        finally:
            if not streaming:
                dispatcher.finish(record)


def check_messages(payload: dict[str, Any], *, counting: bool) -> None:
    """What the gateway needs of a Messages request (the rest is the provider's business),
    worded like Anthropic's own validation errors."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: Field required", param="model")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required", param="messages")
    if not all(isinstance(m, dict) for m in messages):
        raise InvalidRequest("messages: each message must be an object", param="messages")
    if counting:
        return
    max_tokens = payload.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Field required (a positive integer)", param="max_tokens")
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("stream: must be a boolean", param="stream")


def estimate_tokens(payload: dict[str, Any]) -> int:
    """About four characters a token over every text the request carries (system, messages,
    tool definitions): for providers that cannot count for us."""
    chars = len(orjson.dumps(payload.get("system") or ""))
    chars += len(orjson.dumps(payload.get("messages") or []))
    chars += len(orjson.dumps(payload.get("tools") or []))
    return max(1, chars // CHARS_PER_TOKEN)


def _anthropic_routes(model: Any, pinned: str | None) -> bool:
    return any(r.provider.type == "anthropic" for r in candidates(model, pinned))

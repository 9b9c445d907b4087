"""OpenAI's `POST /v1/responses`, streamed or not.

A provider that serves the Responses API itself (OpenAI; presets that say so) gets the body
as it came, only `model` rewritten; any other provider gets it through chat
(providers.responses_bridge), which refuses, with a 400 naming the field, what chat cannot
carry (stored conversation state, built-in tools). A request that continues a conversation
(`previous_response_id`) goes back to the route that answered it, while that route is healthy
(the provider holds the conversation); one the gateway stored itself (a chat-only provider
answered it, or one that keeps nothing, the ChatGPT Codex backend: shared/conversations.py)
is sent whole, its conversation before the new input.
`background: true` is checked and resolved the same
way and screened by the key's guardrails (a block refuses it here, a mask changes the body
the job keeps), then handed to the durable jobs (`Dispatcher.durable`,
gateway/background.py: queued, answered with the Response in status `queued`, or its events
with `stream: true`; its job makes the call and records it). Errors are OpenAI-shaped, as
on every OpenAI route.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay import apikeys
from llmrelay.gateway import requests as checks
from llmrelay.gateway.asgi import read_body, send_sse
from llmrelay.gateway.auth import authenticate
from llmrelay.gateway.background import answer_background, submit_background
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.conversation import response_session
from llmrelay.gateway.dispatch import Dispatcher, bind
from llmrelay.gateway.dropped import add_header
from llmrelay.gateway.errors import ClientDisconnected, GatewayError, InvalidRequest
from llmrelay.gateway.executor import UpstreamRejected
from llmrelay.gateway.ingress import RequestContext
from llmrelay.metering.estimate import answer_tokens
from llmrelay.protocols import openai as wire
from llmrelay.providers.base import Operation
from llmrelay.providers.presets import stores_responses
from llmrelay.shared.conversations import continued


class ResponsesRoutes:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    async def create(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        dispatcher = self._dispatcher
        runtime = dispatcher.live()
        record = CallRecord(
            context.request_id, "responses", context.started, context.client_ip, context.user_agent
        )
        headers = [(b"x-request-id", context.request_id.encode())]
        streaming = False
        queued = False  # a background response: its job records the call
        try:
            snapshot = runtime.snapshots.current
            principal = authenticate(
                scope["headers"], snapshot, context.client_ip, time.time(), apikeys.RESPONSES
            )
            bind(record, principal)
            if principal.capture:
                send, receive = dispatcher.capture(record, send, receive)
            payload = checks.parse_object(
                await read_body(
                    receive, runtime.max_body_bytes, runtime.body_timeout_s, runtime.deadlines
                )
            )
            background = check_responses(payload)
            model, pinned = checks.resolve_model(
                snapshot, principal, payload["model"], embedding=False
            )
            record.virtual_model = model.name
            if background:
                # Screened before it is stored: the job keeps (and sends) what this lets
                # through, and a refusal queues nothing.
                dispatcher.screen(principal, Operation.RESPONSES, payload, record)
                durable = dispatcher.durable
                submitted = await submit_background(
                    durable, scope, principal, model, payload, context, record.guard_hits
                )
                queued = True
                assert durable is not None
                await answer_background(
                    durable,
                    receive,
                    send,
                    principal,
                    submitted,
                    payload.get("stream") is True,
                    headers,
                    runtime.client_watches,
                )
                return
            session = context.session_id
            previous = payload.get("previous_response_id")
            if isinstance(previous, str) and previous:
                session = response_session(previous)
                stored = await dispatcher.conversations.get(previous)
                if stored is not None and stored[0] == principal.project.id:
                    payload = continued(stored, payload)  # the gateway holds it: sent whole
            call = dispatcher.call(
                Operation.RESPONSES,
                payload,
                scope["headers"],
                record,
                context,
                principal,
                session_id=session,
            )
            if payload.get("stream") is True:
                record.stream = streaming = True
                served, relay = await dispatcher.answer(call, receive, snapshot, model, pinned)
                dispatcher.served_headers(headers, served, record)
                add_header(headers, record.dropped)
                await send_sse(receive, send, relay, headers, runtime.client_watches, scope=scope)
                return
            served, answer = await dispatcher.answer(call, receive, snapshot, model, pinned)
            answered: dict[str, Any] = answer.body
            answered["model"] = served.name
            record.take_responses_usage(answered.get("usage"))
            if record.usage is None:
                record.answer_tokens = answer_tokens(answered)
            guard = principal.guard
            if guard is not None and guard.responses:
                dispatcher.screen_answer(guard, Operation.RESPONSES, answered, record)
            response_id = answered.get("id")
            provider = answer.route.provider
            if payload.get("store") is not False and not stores_responses(
                provider.type, provider.preset
            ):
                # Kept by the gateway under an id of its own (an upstream's chat ids may
                # repeat: one derived from them could name another client's response).
                answered["id"] = response_id = "resp_" + secrets.token_hex(16)
                answered["store"] = True
                dispatcher.keep_response(record.project_id, payload, response_id, answered)
            if isinstance(response_id, str):
                dispatcher.remember_response(served, record.project_id, answer.route, response_id)
                # Shared by the replicas before the client can ask another one for it.
                await dispatcher.homes.written()
            dispatcher.served_headers(headers, served, record)
            add_header(headers, record.dropped)
            await dispatcher.answer_json(send, record, 200, orjson.dumps(answered), headers)
        except GatewayError as error:
            streaming = False
            record.fail(error.status, error.code)
            if not isinstance(error, UpstreamRejected):
                headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
            body = wire.error_body(error, context.request_id)
            await dispatcher.answer_json(send, record, error.status, body, headers)
        except ClientDisconnected:
            streaming = False
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
        finally:
            if not streaming and not queued:
                dispatcher.finish(record)


def check_responses(payload: dict[str, Any]) -> bool:
    """Whether the request asks for a background response (400 for what is malformed)."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest(
            "'model' is required", param="model", code="missing_required_parameter"
        )
    given = payload.get("input")
    if given is not None and not isinstance(given, str | list):
        raise InvalidRequest("'input' must be a string or an array of items", param="input")
    background = payload.get("background")
    if background is not None and not isinstance(background, bool):
        raise InvalidRequest("'background' must be a boolean", param="background")
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    return background is True

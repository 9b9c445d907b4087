"""`POST /v1/generate` and `GET /v1/generate/{id}`: llmrelay's normalised model call (the
request and answer shapes are in protocols/generation.py; docs/api.md has the contract).

Without `webhook_url` the call is answered at once, through the same admission, routing,
failover and recording as a chat completion (it is one, inside). With it, the URL is checked
(jobs/webhooks/ssrf.py: never an internal address), the body goes through the key's
guardrails (refused, or masked before it is stored), a durable job is queued (202, `queued`),
and its outcome goes to the webhook as a signed event; `GET /v1/generate/{id}` reads it.
Errors are OpenAI-shaped.
"""

from __future__ import annotations

import time

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay import apikeys
from llmrelay.gateway import requests as checks
from llmrelay.gateway.asgi import read_body, send_json
from llmrelay.gateway.auth import authenticate, key_digest, presented_key
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.capabilities import needs_of
from llmrelay.gateway.dispatch import Dispatcher, bind
from llmrelay.gateway.durable import GENERATION_ID
from llmrelay.gateway.errors import ClientDisconnected, GatewayError, InvalidRequest, NotFound
from llmrelay.gateway.executor import UpstreamRejected
from llmrelay.gateway.ingress import RequestContext
from llmrelay.metering.estimate import answer_tokens
from llmrelay.protocols import generation
from llmrelay.protocols import openai as wire
from llmrelay.providers.base import Operation

GENERATE_PREFIX = "/v1/generate/"
#: How the key's guardrails walk a queued generation's body (guardrails/fields.py).
SCREENED_AS = "generate"


class GenerateRoutes:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    async def create(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        dispatcher = self._dispatcher
        runtime = dispatcher.live()
        record = CallRecord(
            context.request_id, "generate", context.started, context.client_ip, context.user_agent
        )
        headers = [(b"x-request-id", context.request_id.encode())]
        queued = False  # then the job records the call, under this request id
        try:
            snapshot = runtime.snapshots.current
            principal = authenticate(
                scope["headers"], snapshot, context.client_ip, time.time(), apikeys.GENERATE
            )
            bind(record, principal)
            if principal.capture:
                send, receive = dispatcher.capture(record, send, receive)
            payload = checks.parse_object(
                await read_body(
                    receive, runtime.max_body_bytes, runtime.body_timeout_s, runtime.deadlines
                )
            )
            generation.check_generate(payload)
            model, pinned = checks.resolve_model(
                snapshot, principal, payload["model"], embedding=False
            )
            record.virtual_model = model.name
            webhook_url = payload.get(generation.WEBHOOK_FIELD)
            if webhook_url is not None:
                durable = dispatcher.durable
                if durable is None:
                    raise InvalidRequest(
                        "queued generations need durable jobs, which this gateway does not run",
                        param=generation.WEBHOOK_FIELD,
                    )
                # Screened before it is stored: the job keeps (and sends) what this lets
                # through, and a refusal queues nothing.
                dispatcher.screen(principal, SCREENED_AS, payload, record)
                digest = key_digest(presented_key(scope["headers"]) or "")
                body = await durable.submit_generation(
                    principal,
                    digest,
                    model,
                    payload,
                    webhook_url,
                    context,
                    record.guard_hits or (),
                )
                queued = True
                await send_json(send, 202, orjson.dumps(body), headers)
                return
            chat = generation.chat_request(payload)
            needs = None
            if model.capability_aware or model.fallbacks or model.context_fallbacks:
                needs = needs_of(chat)
            call = dispatcher.call(
                Operation.CHAT, chat, scope["headers"], record, context, principal, needs=needs
            )
            served, answer = await dispatcher.answer(call, receive, snapshot, model, pinned)
            record.take_usage(answer.body.get("usage"))
            if record.usage is None:
                record.answer_tokens = answer_tokens(answer.body)
            usage = record.settle_usage()
            content, finish_reason = generation.completion_parts(answer.body)
            body = generation.generation_body(
                generation_id=context.request_id,
                request_id=context.request_id,
                created=int(time.time()),
                model=served.name,
                provider=record.provider,
                content=content,
                finish_reason=finish_reason,
                input_tokens=None if usage is None else usage.prompt,
                output_tokens=None if usage is None else usage.output,
                latency_ms=record.latency_ms(),
                metadata=payload.get("metadata"),
            )
            dispatcher.served_headers(headers, served, record)
            await dispatcher.answer_json(send, record, 200, orjson.dumps(body), headers)
        except GatewayError as error:
            record.fail(error.status, error.code)
            if not isinstance(error, UpstreamRejected):
                headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
            failed = wire.error_body(error, context.request_id)
            await dispatcher.answer_json(send, record, error.status, failed, headers)
        except ClientDisconnected:
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
        finally:
            if not queued:
                dispatcher.finish(record)

    async def by_id(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        """GET /v1/generate/{id}: a queued generation, for the project that queued it."""
        runtime = self._dispatcher.live()
        method = scope.get("method", "")
        generation_id = str(scope.get("path", ""))[len(GENERATE_PREFIX) :]
        headers = [(b"x-request-id", context.request_id.encode())]
        try:
            if method != "GET" or "/" in generation_id:
                raise NotFound(f"no route for {method} {scope.get('path', '')}")
            snapshot = runtime.snapshots.current
            principal = authenticate(
                scope["headers"], snapshot, context.client_ip, time.time(), apikeys.GENERATE
            )
            durable = self._dispatcher.durable
            found = None
            if durable is not None and GENERATION_ID.fullmatch(generation_id):
                found = await durable.generation(principal, generation_id)
            if found is None:
                raise NotFound(
                    f"No generation found with id '{generation_id}'.", code="generation_not_found"
                )
            await send_json(send, 200, orjson.dumps(found), headers)
        except GatewayError as error:
            await send_json(send, error.status, wire.error_body(error, context.request_id), headers)

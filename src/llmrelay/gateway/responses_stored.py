"""Responses a provider keeps: `GET /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
and `POST /v1/responses/compact`.

A stored response lives at the provider that created it, so reading or cancelling one goes
to the route that answered it, as the replica that answered remembered (dispatch.Dispatcher.
homes: this process's memory, or shared by the replicas through Redis or PostgreSQL,
shared/bindings.py). A background response (`resp_` + a job id) is read from its job instead
(`Dispatcher.durable`), whichever process queued it. An id the gateway did not give out, one
from another project, or one answered through chat (nothing was stored) is a 404, as OpenAI
answers for an id it does not hold. A response the gateway stored itself (a chat-only provider
answered it: shared/conversations.py) is read from there; cancelling one is refused as OpenAI
refuses it for a finished synchronous response. Compaction needs a provider that serves the
Responses API.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs

import orjson
from starlette.types import Receive, Scope, Send

from llmrelay import apikeys
from llmrelay.gateway import requests as checks
from llmrelay.gateway.asgi import read_body, send_json
from llmrelay.gateway.auth import authenticate
from llmrelay.gateway.background import send_events
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.dispatch import Dispatcher, bind
from llmrelay.gateway.durable import is_background_response
from llmrelay.gateway.errors import (
    ClientDisconnected,
    GatewayError,
    InvalidRequest,
    NotFound,
    UpstreamFailed,
)
from llmrelay.gateway.executor import UpstreamRejected, candidates, summarise
from llmrelay.gateway.ingress import RequestContext
from llmrelay.protocols import openai as wire
from llmrelay.providers.base import Operation, UpstreamRequest
from llmrelay.providers.errors import UpstreamError
from llmrelay.providers.headers import CLIENT_REQUEST_ID
from llmrelay.providers.openai import fixed_headers
from llmrelay.providers.presets import speaks_responses
from llmrelay.snapshot.model import KeySnap, RouteSnap, Snapshot

RESPONSES_PREFIX = "/v1/responses/"


class StoredResponses:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    async def by_id(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        """GET /v1/responses/{id} and POST /v1/responses/{id}/cancel (GatewayApp routes every
        path under /v1/responses/ here but compact)."""
        runtime = self._dispatcher.live()
        method = scope.get("method", "")
        rest = str(scope.get("path", ""))[len(RESPONSES_PREFIX) :]
        response_id, _, action = rest.partition("/")
        headers = [(b"x-request-id", context.request_id.encode())]
        try:
            if not response_id or (method, action) not in (("GET", ""), ("POST", "cancel")):
                raise NotFound(f"no route for {method} {scope.get('path', '')}")
            snapshot = runtime.snapshots.current
            principal = authenticate(
                scope["headers"], snapshot, context.client_ip, time.time(), apikeys.RESPONSES
            )
            durable = self._dispatcher.durable
            home = await self._dispatcher.homes.home(response_id)
            kept = await self._dispatcher.conversations.get(response_id) if home is None else None
            if kept is not None and kept[0] == principal.project.id:
                if action:  # as OpenAI answers for a finished synchronous response
                    raise InvalidRequest("Cannot cancel a synchronous response.")
                await send_json(send, 200, orjson.dumps(kept[1]), headers)
                return
            if durable is not None and home is None and is_background_response(response_id):
                stream, starting_after = _stream_query(scope)
                if stream and not action:
                    events = await durable.response_events(
                        principal, response_id, starting_after=starting_after
                    )
                    if events is not None:
                        await send_events(receive, send, events, headers, runtime.client_watches)
                        return
                    raise NotFound(
                        f"No response found with id '{response_id}'.", code="response_not_found"
                    )
                found = await durable.response(principal, response_id, cancel=action == "cancel")
                if found is None:
                    raise NotFound(
                        f"No response found with id '{response_id}'.", code="response_not_found"
                    )
                await send_json(send, 200, orjson.dumps(found), headers)
                return
            route = _route_of(snapshot, principal, response_id, home)
            provider = route.provider
            path = f"/responses/{response_id}" + ("/cancel" if action else "")
            request = UpstreamRequest(
                url=f"{provider.base_url}{path}",
                headers={**fixed_headers(provider), CLIENT_REQUEST_ID: context.request_id},
                body=b"",
                method=method,
            )
            try:
                upstream = await runtime.executor.registry.transport(provider.type).send(
                    request, provider
                )
                raw = await upstream.read()
                upstream.release()
            except UpstreamError as exc:
                raise UpstreamFailed(f"provider {provider.slug}: {exc}") from None
            if upstream.status == 404:
                raise NotFound(f"No response found with id '{response_id}'.")
            if upstream.status >= 300:
                detail = summarise(wire.upstream_error_message(raw) or "")
                raise UpstreamFailed(
                    f"provider {provider.slug} answered {upstream.status}: {detail}"
                )
            answered = orjson.loads(raw)
            if isinstance(answered, dict):
                answered["model"] = _virtual_model(snapshot, principal, route)
            await send_json(send, 200, orjson.dumps(answered), headers)
        except GatewayError as error:
            await send_json(send, error.status, wire.error_body(error, context.request_id), headers)
        except ClientDisconnected:
            pass

    async def compact(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> None:
        dispatcher = self._dispatcher
        runtime = dispatcher.live()
        record = CallRecord(
            context.request_id,
            "responses.compact",
            context.started,
            context.client_ip,
            context.user_agent,
        )
        headers = [(b"x-request-id", context.request_id.encode())]
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
            name = payload.get("model")
            if not isinstance(name, str) or not name:
                raise InvalidRequest("'model' is required", param="model")
            model, pinned = checks.resolve_model(snapshot, principal, name, embedding=False)
            record.virtual_model = model.name
            routes = candidates(model, pinned, principal.policy)
            if not any(speaks_responses(r.provider.type, r.provider.preset) for r in routes):
                raise InvalidRequest(
                    f"model {model.name!r} has no provider that serves the Responses API, "
                    "which compaction needs",
                    param="model",
                )
            call = dispatcher.call(
                Operation.RESPONSES_COMPACT, payload, scope["headers"], record, context, principal
            )
            served, answer = await dispatcher.answer(call, receive, snapshot, model, pinned)
            record.take_responses_usage(answer.body.get("usage"))
            dispatcher.served_headers(headers, served, record)
            body = dispatcher.rename(served.name).apply(answer.raw, answer.body)
            await dispatcher.answer_json(send, record, 200, body, headers)
        except GatewayError as error:
            record.fail(error.status, error.code)
            if not isinstance(error, UpstreamRejected):
                headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
            failed = wire.error_body(error, context.request_id)
            await dispatcher.answer_json(send, record, error.status, failed, headers)
        except ClientDisconnected:
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
        finally:
            dispatcher.finish(record)


def _route_of(
    snapshot: Snapshot, principal: KeySnap, response_id: str, home: tuple[str, str | None] | None
) -> RouteSnap:
    """The route holding the response, when it is the caller's project's (else 404)."""
    if home is not None and home[1] == principal.project.id:
        for model in snapshot.tenant_models(principal.tenant_id).values():
            for route in model.routes:
                if route.id == home[0]:
                    return route
    raise NotFound(f"No response found with id '{response_id}'.", code="response_not_found")


def _virtual_model(snapshot: Snapshot, principal: KeySnap, route: RouteSnap) -> str | None:
    for model in snapshot.tenant_models(principal.tenant_id).values():
        if any(r.id == route.id for r in model.routes):
            return model.name
    return None


def _stream_query(scope: Scope) -> tuple[bool, int | None]:
    """`?stream=true&starting_after=N` of a GET: whether to stream, and after which event."""
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    stream = query.get("stream", ["false"])[-1].lower() == "true"
    after = query.get("starting_after", [None])[-1]
    if after is None:
        return stream, None
    try:
        starting_after = int(after)
    except ValueError:
        raise InvalidRequest(
            "'starting_after' must be an integer", param="starting_after"
        ) from None
    return stream, starting_after

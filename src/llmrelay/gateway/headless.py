"""A model call without an HTTP client: what a durable job (a background response, a queued
generation) runs. It takes the served path's steps — admission by the key's and project's
limits, the model's fallbacks, the strategy's order, failover, metering — through the same
Dispatcher, and ends in one record through the recorder, under the job's request id.

What differs from a served request: the principal is found by the key's digest the job keeps
(the key must still be active and unexpired when the job runs; the IP allowlist was checked at
submission), nothing ever reports a client gone, answers are read whole (no streams), and the
caller may hook the moment before a provider is first called (`before_send`: the job saves
"the call started" there, so a later attempt never calls the provider twice) and ask a provider
that serves the Responses API itself to run the response in the background
(`upstream_background`: the job then polls it, and a resumed attempt can too).

A prepaid tenant's job reserves like a served request (a 402 fails the job). An attempt
whose worker stopped after reserving and before the call leaves the reservation held: the
next attempt goes on under it (`adopt_reservation`), since a request id reserves once.

Not on the served path: nothing here runs for a request that is not a job's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.types import Message

from llmrelay.billing.errors import LedgerUnavailable
from llmrelay.gateway import requests as checks
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.capabilities import needs_of
from llmrelay.gateway.capture import Capture
from llmrelay.gateway.conversation import response_session
from llmrelay.gateway.dispatch import Answer, Dispatcher, ModelCall, bind
from llmrelay.gateway.errors import AuthenticationFailed, BillingUnavailable
from llmrelay.gateway.executor import Executor
from llmrelay.providers.base import Adapter, Operation, Transport, UpstreamRequest, UpstreamResponse
from llmrelay.providers.headers import CLIENT_REQUEST_ID
from llmrelay.providers.presets import speaks_responses
from llmrelay.snapshot.model import KeySnap, ModelSnap, ProviderSnap, RouteSnap, Snapshot

#: Called once per upstream call, right before it is sent (after admission).
BeforeSend = Callable[[], Awaitable[None]]


def principal_of(snapshot: Snapshot, key_digest: str, key_id: str | None, now: float) -> KeySnap:
    """The key that submitted a job, as it stands now: a job whose key was revoked, rotated,
    disabled or has expired since does not run (401-type errors the job reports)."""
    principal = snapshot.keys_by_digest.get(key_digest)
    if principal is None or (key_id is not None and principal.id != key_id):
        raise AuthenticationFailed(
            "the API key that submitted this job no longer exists (revoked or rotated)",
            code="key_revoked",
        )
    if principal.status != "active":
        raise AuthenticationFailed(
            f"the API key that submitted this job is {principal.status}", code="key_revoked"
        )
    if principal.expires_at is not None and principal.expires_at <= now:
        raise AuthenticationFailed(
            "the API key that submitted this job has expired", code="expired_api_key"
        )
    return principal


def route_of(snapshot: Snapshot, tenant_id: str, route_id: str) -> tuple[ModelSnap, RouteSnap]:
    """A route of the tenant's models by id (a resumed job finds where its call went)."""
    for model in snapshot.tenant_models(tenant_id).values():
        for route in model.routes:
            if route.id == route_id:
                return model, route
    raise LookupError(route_id)


async def _never_disconnects() -> Message:
    """A job's `receive`: no client can leave, so the wait ends only when it is cancelled
    (with the watch that made it)."""
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable")  # pragma: no cover


class Headless:
    """Model calls for the jobs of one process, over its data plane's dispatcher."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def snapshot(self) -> Snapshot:
        return self.dispatcher.live().snapshots.current

    def record(
        self,
        principal: KeySnap,
        *,
        endpoint: str,
        request_id: str,
        created_at: float,
        client_ip: str | None,
        user_agent: str | None,
    ) -> CallRecord:
        """The call's record, bound to its key. `created_at` is the submission's time: the
        record of a job is dated when the client asked (and a second attempt's record of the
        same request is the same row, never a second one)."""
        record = CallRecord(request_id, endpoint, time.perf_counter(), client_ip, user_agent)
        record.created = created_at
        bind(record, principal)
        if principal.capture:
            record.capture = Capture(self.dispatcher.live().capture_max_bytes)
        return record

    async def adopt_reservation(self, record: CallRecord, principal: KeySnap | None) -> None:
        """Go on under the reservation an earlier attempt of the job made, if one is held:
        the call then reserves nothing and its end settles that one. `principal` None: an
        attempt that resumes a call already made (looked up whatever the key is now). Raises
        BillingUnavailable when the ledger cannot be read."""
        prepaid = self.dispatcher.live().prepaid
        if prepaid is None or (principal is not None and not principal.prepaid):
            return
        try:
            record.reserved = await prepaid.held(record.request_id)
        except LedgerUnavailable as unavailable:
            raise BillingUnavailable(str(unavailable)) from None

    async def keep_unmetered(self, request_id: str) -> None:
        """A job whose call started and was lost with its worker: a reservation it held is
        kept as `metering_failed` until reconciled (the provider may have billed)."""
        prepaid = self.dispatcher.live().prepaid
        if prepaid is not None and await prepaid.held(request_id):
            await prepaid.keep_unmetered(request_id)

    def release(self, record: CallRecord) -> None:
        """Give back what admission took, without a record: the attempt stopped before any
        provider call and the job runs again (the ledger was away)."""
        admission = record.admission
        if admission is not None:
            record.admission = None
            admission.program.owner.settle(admission, None, 0)

    def keep_bodies(self, record: CallRecord, request: dict[str, Any], answer: Any) -> None:
        """The call's bodies, for a key that captures them (`capture: full`): the request as
        submitted, the answer as the job's client reads it. Before `finish`."""
        capture = record.capture
        if capture is not None:
            capture.keep(orjson.dumps(request), orjson.dumps(answer))

    async def answer(
        self,
        record: CallRecord,
        principal: KeySnap,
        operation: Operation,
        payload: dict[str, Any],
        *,
        before_send: BeforeSend | None = None,
        upstream_background: bool = False,
    ) -> tuple[ModelSnap, Answer]:
        """The model that served and its whole answer, as `Dispatcher.answer` gives it to a
        served request (its errors too: the gateway's, with LimitExceeded before anything
        was admitted). The record is left open: `finish` it once the job is done with it."""
        dispatcher = self.dispatcher
        runtime = dispatcher.live()
        snapshot = runtime.snapshots.current
        model, pinned = checks.resolve_model(snapshot, principal, payload["model"], embedding=False)
        record.virtual_model = model.name
        # Screened at submission already (what the job stored passed); again here, as every
        # call to a provider is, for the rules in force now (a job queued before a rule).
        dispatcher.screen(principal, operation, payload, record)
        record.payload = payload
        needs = None
        if operation is Operation.CHAT and (
            model.capability_aware or model.fallbacks or model.context_fallbacks
        ):
            needs = needs_of(payload)
        session = None
        previous = payload.get("previous_response_id")
        if operation is Operation.RESPONSES and isinstance(previous, str) and previous:
            session = response_session(previous)
        if before_send is not None or upstream_background:
            executor = runtime.executor
            registry = executor.registry.wrapped(
                _background_adapter if upstream_background else _same,
                _announcing(before_send) if before_send is not None else _same,
            )
            hooked = Executor(registry, executor.breakers, executor.router)
            hooked.affinity = executor.affinity  # the bindings the replicas share
            hooked.resources = executor.resources  # the accounts' quota buckets
            runtime = dataclasses.replace(runtime, executor=hooked)
        call = ModelCall(
            runtime,
            operation,
            payload,
            {CLIENT_REQUEST_ID: record.request_id},
            record,
            None,
            session,
            principal.policy,
            needs,
            dispatcher.scopes.of(principal),
            prepaid=principal.prepaid and not record.reserved,
        )
        return await dispatcher.answer(call, _never_disconnects, snapshot, model, pinned)

    def finish(self, record: CallRecord) -> None:
        """Queue the record and settle what admission took: once per call."""
        self.dispatcher.finish(record)

    async def fetch(
        self, provider: ProviderSnap, method: str, path: str, request_id: str
    ) -> tuple[int, bytes]:
        """One plain request to a provider's API (a Response polled or cancelled there),
        with its credential, through the process's connection pool; (status, body). Raises
        providers.errors.UpstreamError."""
        from llmrelay.providers.openai import fixed_headers

        request = UpstreamRequest(
            url=f"{provider.base_url}{path}",
            headers={**fixed_headers(provider), CLIENT_REQUEST_ID: request_id},
            body=b"",
            method=method,
        )
        registry = self.dispatcher.live().executor.registry
        response = await registry.transport(provider.type).send(request, provider)
        try:
            return response.status, await response.read()
        finally:
            response.release()


def _same(found: Any) -> Any:
    return found


def _background_adapter(adapter: Adapter) -> Adapter:
    return _BackgroundUpstream(adapter)


class _BackgroundUpstream:
    """An adapter that asks a provider serving the Responses API itself for a background
    response (`background: true`, `store: true`: it answers at once, queued, and keeps the
    response to be polled). Other routes (through the chat bridge) get the body unchanged."""

    def __init__(self, inner: Adapter) -> None:
        self._inner = inner
        self.protocol = inner.protocol

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        provider = route.provider
        if operation is Operation.RESPONSES and speaks_responses(provider.type, provider.preset):
            payload = {**payload, "background": True, "store": True}  # a copy: failover
        return self._inner.build_request(operation, route, payload, forwarded_headers)


def _announcing(before_send: BeforeSend) -> Callable[[Transport], Transport]:
    def wrap(transport: Transport) -> Transport:
        return _Announced(transport, before_send)

    return wrap


class _Announced:
    """A transport that runs the call's hook before each send."""

    def __init__(self, inner: Transport, before_send: BeforeSend) -> None:
        self._inner = inner
        self._before_send = before_send

    async def send(self, request: UpstreamRequest, provider: ProviderSnap) -> UpstreamResponse:
        await self._before_send()
        return await self._inner.send(request, provider)

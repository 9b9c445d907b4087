"""The durable side of the data plane's asynchronous routes (gateway/durable.py's interface):
queuing a background response or a generation, reading one back, cancelling a background
response. Built once per serving process by stack.py.

The data plane screened the request by the key's guardrails before it gets here (what is stored
is what the provider will be sent); their hit rows ride in the clear part, for the job's
record. A submission is one transaction: the job, with the client's request sealed (context =
the job id) and what is not secret in the clear (the request id, the key's digest, the model,
the expiry). The runner of this process is woken at once; any other runner finds it at its next
poll. Reads are for the project that submitted (another project's id is a 404, as OpenAI
answers for an id it does not hold), until the job's expiry; then it is gone.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmrelay.gateway.errors import InvalidRequest
from llmrelay.gateway.ingress import RequestContext
from llmrelay.jobs import background_responses, generations, queue, response_stream
from llmrelay.jobs.model_calls import Submitted
from llmrelay.jobs.webhooks import ssrf
from llmrelay.protocols.generation import WEBHOOK_FIELD
from llmrelay.protocols.responses_chat import response_object
from llmrelay.settings import Settings
from llmrelay.snapshot.model import KeySnap, ModelSnap
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import new_id
from llmrelay.store.models_jobs import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED


class Submissions:
    def __init__(
        self,
        settings: Settings,
        engine: AsyncEngine,
        sealer: Sealer,
        wake: Callable[[], None] | None = None,
        resolve: ssrf.Resolve = ssrf.system_resolve,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.sealer = sealer
        self.wake = wake
        self.policy = ssrf.WebhookPolicy.from_settings(settings)
        self._resolve = resolve

    # -- background responses ----------------------------------------------------------

    async def submit_response(
        self,
        principal: KeySnap,
        key_digest: str,
        model: ModelSnap,
        payload: dict[str, Any],
        context: RequestContext,
        guard_hits: Sequence[tuple[Any, ...]] = (),
    ) -> dict[str, Any]:
        job_id = new_id()
        submitted = Submitted.now(
            context, key_digest, model, ttl_s=self.settings.background_ttl_s, hits=guard_hits
        )
        await self._enqueue(
            background_responses.BACKGROUND_RESPONSE.name,
            job_id,
            submitted,
            principal,
            payload,
            background_responses.BACKGROUND_RESPONSE.max_attempts,
        )
        return _response_object(job_id, submitted, payload, "queued")

    async def response(
        self, principal: KeySnap, response_id: str, *, cancel: bool
    ) -> dict[str, Any] | None:
        job_id = response_id.removeprefix("resp_")
        kind = background_responses.KIND
        now = time.time()
        async with self.engine.begin() as conn:
            row = await _visible(conn, job_id, kind, principal, now)
            if row is None:
                return None
            if cancel:
                if row.status in (QUEUED, RUNNING):
                    await queue.request_cancel(conn, job_id, now=now)
                    row = await _visible(conn, job_id, kind, principal, now)
                    assert row is not None
                else:
                    shown = self._response(row)
                    if shown["status"] != "cancelled":
                        raise InvalidRequest(
                            f"Cannot cancel a {shown['status']} response.",
                            param="response_id",
                            code="response_not_cancellable",
                        )
                    return shown
        return self._response(row)

    async def response_events(
        self, principal: KeySnap, response_id: str, *, starting_after: int | None
    ) -> AsyncIterator[dict[str, Any]] | None:
        first = await self.response(principal, response_id, cancel=False)
        if first is None:
            return None

        async def read() -> dict[str, Any] | None:
            return await self.response(principal, response_id, cancel=False)

        return response_stream.events(read, first, starting_after)

    def _response(self, row: Any) -> dict[str, Any]:
        submitted = Submitted.of(row.payload)
        request = self._open(row.payload_sealed, row.id)
        if row.status == SUCCEEDED and row.result_sealed is not None:
            kept: dict[str, Any] = self._open(row.result_sealed, row.id)
            return kept
        status, error = _state(row)
        response_error = (
            None if error is None else {"code": error.get("code"), "message": error.get("message")}
        )
        return _response_object(row.id, submitted, request, status, response_error)

    # -- generations -------------------------------------------------------------------

    async def submit_generation(
        self,
        principal: KeySnap,
        key_digest: str,
        model: ModelSnap,
        request: dict[str, Any],
        webhook_url: str,
        context: RequestContext,
        guard_hits: Sequence[tuple[Any, ...]] = (),
    ) -> dict[str, Any]:
        try:
            await ssrf.check(webhook_url, self.policy, self._resolve)
        except ssrf.RefusedUrl as refused:
            raise InvalidRequest(
                f"'webhook_url' cannot be used: {refused}",
                param=WEBHOOK_FIELD,
                code="invalid_webhook_url",
            ) from None
        job_id = new_id()
        submitted = Submitted.now(
            context, key_digest, model, ttl_s=self.settings.background_ttl_s, hits=guard_hits
        )
        await self._enqueue(
            generations.KIND,
            job_id,
            submitted,
            principal,
            request,
            generations.GENERATION.max_attempts,
        )
        return generations.queued_object(job_id, submitted, request, "queued")

    async def generation(self, principal: KeySnap, generation_id: str) -> dict[str, Any] | None:
        job_id = generation_id.removeprefix("gen_")
        async with self.engine.connect() as conn:
            row = await _visible(conn, job_id, generations.KIND, principal, time.time())
        if row is None:
            return None
        submitted = Submitted.of(row.payload)
        request = self._open(row.payload_sealed, row.id)
        if row.status == SUCCEEDED and row.result_sealed is not None:
            kept: dict[str, Any] = self._open(row.result_sealed, row.id)
            return kept
        status, _ = _state(row)
        if status == "failed":
            return generations.failed_object(row.id, submitted, request, _result(row))
        return generations.queued_object(row.id, submitted, request, status)

    # -- shared --------------------------------------------------------------------------

    async def _enqueue(
        self,
        kind: str,
        job_id: str,
        submitted: Submitted,
        principal: KeySnap,
        request: dict[str, Any],
        max_attempts: int,
    ) -> None:
        sealed = self.sealer.seal(orjson.dumps(request), context=job_id)
        async with self.engine.begin() as conn:
            await queue.enqueue(
                conn,
                kind,
                submitted.payload(),
                now=submitted.created_at,
                job_id=job_id,
                max_attempts=max_attempts,
                tenant_id=principal.tenant_id,
                project_id=principal.project.id,
                key_id=principal.id,
                payload_sealed=sealed,
                expires_at=submitted.expires_at,
            )
        if self.wake is not None:
            self.wake()

    def _open(self, sealed: str | None, job_id: str) -> Any:
        if sealed is None:
            return {}
        return orjson.loads(self.sealer.open(sealed, context=job_id))


async def _visible(
    conn: AsyncConnection, job_id: str, kind: str, principal: KeySnap, now: float
) -> Any:
    """The job, when it is of `kind`, the caller's project's, and not expired; else None."""
    row = (await conn.execute(select(queue.jobs).where(queue.jobs.c.id == job_id))).first()
    if row is None or row.kind != kind or row.project_id != principal.project.id:
        return None
    expires_at = row.expires_at
    if expires_at is not None and _aware(expires_at).timestamp() <= now:
        return None
    return row


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _result(row: Any) -> dict[str, Any]:
    return row.result if isinstance(row.result, dict) else {}


def _state(row: Any) -> tuple[str, dict[str, Any] | None]:
    """The status a reader sees, and the error of a failed one."""
    if row.status == SUCCEEDED:
        return str(_result(row).get("status") or "completed"), None
    if row.status == FAILED:
        error = _result(row).get("error")
        if not isinstance(error, dict):
            error = {"code": "server_error", "message": row.error or "the job failed"}
        return "failed", error
    if row.status == CANCELLED:
        return "cancelled", None
    if row.status == RUNNING:
        return ("cancelled" if row.cancel_requested else "in_progress"), None
    return ("in_progress" if row.checkpoint else "queued"), None


def _response_object(
    job_id: str,
    submitted: Submitted,
    request: dict[str, Any],
    status: str,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A background response that has no answer (yet, or ever): the Response object with the
    request's settings, as OpenAI shows one."""
    found = response_object(
        response_id=background_responses.public_id(job_id),
        created_at=int(submitted.created_at),
        model=submitted.model,
        request=request,
        status=status,
        output=[],
        usage=None,
        error=error,
    )
    found["background"] = True
    found["store"] = request.get("store") is not False
    found["completed_at"] = None
    found["previous_response_id"] = request.get("previous_response_id")
    return found

"""The `background_response` job: one `POST /v1/responses` with `background: true`, run
through the data plane's headless path, its answer kept (sealed) for the client to poll.

Where the route's provider serves the Responses API itself, the provider is asked to run the
response in the background too; its id and the route go into the checkpoint, and the job polls
the provider (jobs/upstream_poll.py). An attempt resumed after its worker died polls that id:
the provider is never asked twice. Through the chat bridge there is no such handle, and a
resumed attempt fails the job `worker_lost` (jobs/model_calls.py).

A cancel stops the attempt at its next heartbeat (the provider is asked to cancel too); a
call that finished before that is recorded as it was, but its answer is not kept: the response
reads `cancelled`, as its client was told.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.errors import BillingUnavailable
from llmrelay.gateway.headless import Headless, route_of
from llmrelay.jobs import upstream_poll
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind, RunAgainAt
from llmrelay.jobs.model_calls import (
    LIMITS_UNAVAILABLE_RETRY_S,
    POLLING,
    SENT,
    Submitted,
    call_model,
    cancel_was_asked,
    failure,
    give_up_lost,
    record_for,
)
from llmrelay.metering.estimate import answer_tokens
from llmrelay.providers.base import Operation
from llmrelay.snapshot.model import ProviderSnap

KIND: Final = "background_response"
ENDPOINT: Final = "responses"
#: What the job does not pass on to the provider: the gateway runs it in the background.
_NOT_SENT: Final = ("background", "stream")


def public_id(job_id: str) -> str:
    return f"resp_{job_id}"


async def run(context: JobContext) -> dict[str, Any] | None:
    submitted = Submitted.of(context.payload)
    headless = Headless(context.services.dispatcher)
    checkpoint = context.checkpoint or {}
    phase = checkpoint.get("phase")
    if phase == POLLING:
        return await _resume(context, headless, submitted, checkpoint)
    if phase == SENT:
        raise await give_up_lost(context, headless, submitted, ENDPOINT)
    body = context.secret_payload()
    request = {k: v for k, v in body.items() if k not in _NOT_SENT}
    record, served, answer = await call_model(
        context,
        headless,
        submitted,
        Operation.RESPONSES,
        request,
        endpoint=ENDPOINT,
        upstream_background=True,
    )
    found = answer.body
    upstream_id = found.get("id")
    if found.get("status") not in upstream_poll.TERMINAL and isinstance(upstream_id, str):
        await context.save_checkpoint(
            {
                "phase": POLLING,
                "route_id": answer.route.id,
                "upstream_id": upstream_id,
                "model": served.name,
            }
        )
        found = await _poll(
            context, headless, submitted, answer.route.provider, upstream_id, record
        )
    return await _finish(context, headless, record, found, served.name)


async def _resume(
    context: JobContext, headless: Headless, submitted: Submitted, checkpoint: dict[str, Any]
) -> dict[str, Any] | None:
    """A Response the provider runs for an attempt that did not finish: poll it."""
    record = record_for(context, submitted, ENDPOINT)
    record.virtual_model = str(checkpoint["model"])
    try:
        model, route = route_of(
            headless.snapshot(), context.job.tenant_id or "", str(checkpoint["route_id"])
        )
    except LookupError:
        message = "the route whose provider holds this response was removed"
        record.fail(502, "route_removed")
        headless.finish(record)
        raise GiveUp(message, result=failure("route_removed", message)) from None
    provider = route.provider
    record.provider, record.provider_type = provider.slug, provider.type
    record.upstream_model, record.route_id = route.upstream_model, route.id
    record.price = route.price or model.price
    record.attempts = 1
    try:
        await headless.adopt_reservation(record, None)  # the attempt that sent it reserved
    except BillingUnavailable:
        raise RunAgainAt(time.time() + LIMITS_UNAVAILABLE_RETRY_S) from None
    upstream_id = str(checkpoint["upstream_id"])
    found = await _poll(context, headless, submitted, provider, upstream_id, record)
    return await _finish(context, headless, record, found, record.virtual_model)


async def _poll(
    context: JobContext,
    headless: Headless,
    submitted: Submitted,
    provider: ProviderSnap,
    upstream_id: str,
    record: CallRecord,
) -> dict[str, Any]:
    request_id = submitted.request_id
    try:
        return await upstream_poll.poll(
            headless, provider, upstream_id, request_id=request_id, until=submitted.expires_at
        )
    except asyncio.CancelledError:
        if await cancel_was_asked(context):
            await upstream_poll.cancel(headless, provider, upstream_id, request_id=request_id)
            record.fail(CLIENT_CLOSED_REQUEST, "cancelled")
            headless.finish(record)
        raise
    except upstream_poll.PollFailed as failed:
        if failed.code == "expired":  # nobody will read it: the provider may stop too
            await upstream_poll.cancel(headless, provider, upstream_id, request_id=request_id)
        record.fail(502, failed.code)
        headless.finish(record)
        raise GiveUp(failed.message, result=failure(failed.code, failed.message)) from None


async def _finish(
    context: JobContext,
    headless: Headless,
    record: CallRecord,
    found: dict[str, Any],
    model: str,
) -> dict[str, Any]:
    """Record the call once, and keep its answer (sealed) unless the client cancelled."""
    status = str(found.get("status") or "completed")
    record.take_responses_usage(found.get("usage"))
    if record.usage is None:
        record.answer_tokens = answer_tokens(found)
    if status == "failed":
        error = found.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        record.fail(502, str(code or "response_failed"))
    elif status == "cancelled":
        record.fail(CLIENT_CLOSED_REQUEST, "cancelled")
    request = context.secret_payload()
    kept = {
        **found,
        "id": public_id(context.id),
        "model": model,
        "background": True,
        "store": request.get("store") is not False,
    }
    if status == "completed" and kept.get("completed_at") is None:
        kept["completed_at"] = int(time.time())
    headless.keep_bodies(record, request, kept)
    headless.finish(record)
    if await cancel_was_asked(context):
        return {"status": "cancelled"}
    context.seal_result(kept)
    return {"status": status}


BACKGROUND_RESPONSE = JobKind(KIND, run, max_attempts=5, keep_expiry=True, timeout_s=None)

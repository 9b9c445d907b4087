"""What the jobs that call a model share (background responses, queued generations): the
facts kept at submission, the call itself through the data plane's headless path, and the rule
that a provider is never called twice for one job.

The rule: before the first byte goes to a provider (after admission) the attempt saves a
checkpoint saying so (`sent`), fenced by its claim's epoch. An attempt that finds that
checkpoint and no durable handle on the call (a worker died, or was stopped, while the provider
was answering) does not call again: the job fails with `worker_lost`, and its record says so.
Limits that refuse at run time are not a failure: the job runs again when they reset, as long
as that is before the job's expiry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog
from sqlalchemy.exc import SQLAlchemyError

from llmrelay import apikeys
from llmrelay.billing.errors import LedgerUnavailable
from llmrelay.gateway.auth import scope_refused
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.dispatch import Answer
from llmrelay.gateway.errors import BillingUnavailable, GatewayError
from llmrelay.gateway.headless import Headless, principal_of
from llmrelay.gateway.ingress import RequestContext
from llmrelay.jobs import queue
from llmrelay.jobs.kinds import GiveUp, JobContext, RunAgainAt
from llmrelay.limits.errors import LimitExceeded, LimitsUnavailable
from llmrelay.providers.base import Operation
from llmrelay.snapshot.model import KeySnap, ModelSnap

log = structlog.get_logger(__name__)

#: Checkpoint phases: the provider was (about to be) called; the call is a Response the
#: provider keeps, polled by id (background responses only).
SENT: Final = "sent"
POLLING: Final = "polling"
#: A shared limiter that cannot be reached (fail_closed): try again this much later.
LIMITS_UNAVAILABLE_RETRY_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class Submitted:
    """What a job keeps in the clear about its submission (its request body is sealed)."""

    request_id: str
    key_digest: str
    #: The virtual model the submission resolved.
    model: str
    created_at: float
    expires_at: float
    client_ip: str | None = None
    user_agent: str | None = None
    #: The guardrail hit rows of the submission's screening (gateway/call.py HIT_COLUMNS:
    #: where and how much matched, never the text), written with the job's record.
    guard_hits: tuple[tuple[Any, ...], ...] = ()

    @classmethod
    def of(cls, payload: dict[str, Any]) -> Submitted:
        return cls(
            request_id=str(payload["request_id"]),
            key_digest=str(payload["key_digest"]),
            model=str(payload["model"]),
            created_at=float(payload["created_at"]),
            expires_at=float(payload["expires_at"]),
            client_ip=payload.get("client_ip"),
            user_agent=payload.get("user_agent"),
            guard_hits=tuple(tuple(row) for row in payload.get("guard_hits") or ()),
        )

    @classmethod
    def now(
        cls,
        context: RequestContext,
        key_digest: str,
        model: ModelSnap,
        *,
        ttl_s: float,
        hits: Sequence[tuple[Any, ...]] = (),
    ) -> Submitted:
        created = time.time()
        return cls(
            request_id=context.request_id,
            key_digest=key_digest,
            model=model.name,
            created_at=created,
            expires_at=created + ttl_s,
            client_ip=context.client_ip,
            user_agent=context.user_agent,
            guard_hits=tuple(hits),
        )

    def hit_rows(self) -> list[tuple[Any, ...]] | None:
        """The submission's hit rows for a record of the job's call (a new list: the call's
        own screening may add to it)."""
        return list(self.guard_hits) if self.guard_hits else None

    def payload(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "key_digest": self.key_digest,
            "model": self.model,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "client_ip": self.client_ip,
            "user_agent": self.user_agent,
            **({"guard_hits": [list(row) for row in self.guard_hits]} if self.guard_hits else {}),
        }


def failure(code: str, message: str, kind: str = "server_error") -> dict[str, Any]:
    """A failed job's result: what its readers (and a webhook's `data`) show."""
    return {"status": "failed", "error": {"message": message, "type": kind, "code": code}}


def failure_of(error: GatewayError) -> dict[str, Any]:
    result = failure(error.code, error.message, error.type)
    result["error"]["param"] = error.param
    return result


def record_for(context: JobContext, submitted: Submitted, endpoint: str) -> CallRecord:
    """A record of the job's call made from the job's own columns (no key needed: the one
    that submitted it may be gone by now)."""
    record = CallRecord(
        submitted.request_id,
        endpoint,
        time.perf_counter(),
        submitted.client_ip,
        submitted.user_agent,
    )
    record.created = submitted.created_at
    record.tenant_id = context.job.tenant_id
    record.project_id = context.job.project_id
    record.key_id = context.job.key_id
    record.virtual_model = submitted.model
    record.guard_hits = submitted.hit_rows()
    return record


async def give_up_lost(
    context: JobContext, headless: Headless, submitted: Submitted, endpoint: str
) -> GiveUp:
    """An attempt found its call started by an attempt that did not finish it: the job fails
    (never a second call), the call gets its record, and a prepaid reservation it held is
    kept until reconciled (the provider may have billed for the lost answer)."""
    message = (
        "the worker running this job stopped while the provider was answering; the call is "
        "not repeated, so its answer is lost"
    )
    try:
        await headless.keep_unmetered(submitted.request_id)
    except LedgerUnavailable:
        raise RunAgainAt(time.time() + LIMITS_UNAVAILABLE_RETRY_S) from None
    record = record_for(context, submitted, endpoint)
    record.fail(500, "worker_lost")
    headless.finish(record)
    return GiveUp(message, result=failure("worker_lost", message))


def check_expiry(submitted: Submitted, now: float) -> None:
    if now >= submitted.expires_at:
        message = "the job was not done before it expired (LLMRELAY_BACKGROUND_TTL_S)"
        raise GiveUp(message, result=failure("expired", message))


async def call_model(
    context: JobContext,
    headless: Headless,
    submitted: Submitted,
    operation: Operation,
    request: dict[str, Any],
    *,
    endpoint: str,
    upstream_background: bool = False,
) -> tuple[CallRecord, ModelSnap, Answer]:
    """The job's one model call: (its open record, the model that served, the answer).
    Raises RunAgainAt (limits), GiveUp (any other refusal or failure, with the error as the
    result; the record is finished then), or CancelledError."""
    now = time.time()
    check_expiry(submitted, now)
    principal = _principal(headless, context, submitted, endpoint, now)
    record = headless.record(
        principal,
        endpoint=endpoint,
        request_id=submitted.request_id,
        created_at=submitted.created_at,
        client_ip=submitted.client_ip,
        user_agent=submitted.user_agent,
    )
    record.guard_hits = submitted.hit_rows()
    sent = False

    async def before_send() -> None:
        nonlocal sent
        if not sent:
            sent = True
            await context.save_checkpoint({"phase": SENT})

    try:
        await headless.adopt_reservation(record, principal)
        served, answer = await headless.answer(
            record,
            principal,
            operation,
            request,
            before_send=before_send,
            upstream_background=upstream_background,
        )
    except (LimitsUnavailable, BillingUnavailable):  # nothing was sent: try again shortly
        headless.release(record)
        at = time.time() + LIMITS_UNAVAILABLE_RETRY_S
        if at < submitted.expires_at:
            raise RunAgainAt(at) from None
        raise
    except LimitExceeded as refused:  # admission comes first: nothing was sent
        at = time.time() + float(refused.headers.get("Retry-After", "1"))
        if at < submitted.expires_at:
            raise RunAgainAt(at) from None
        record.fail(refused.status, refused.code)
        headless.finish(record)
        raise GiveUp(refused.message, result=failure_of(refused)) from None
    except GatewayError as error:
        record.fail(error.status, error.code)
        headless.keep_bodies(record, request, failure_of(error))
        headless.finish(record)
        raise GiveUp(error.message, result=failure_of(error)) from None
    except asyncio.CancelledError:
        if await cancel_was_asked(context):
            record.fail(CLIENT_CLOSED_REQUEST, "cancelled")
            headless.finish(record)
        raise
    return record, served, answer


#: The key scope a job's endpoint needs (the one its submission was checked against).
_SCOPES: Final = {"generate": apikeys.GENERATE, "responses": apikeys.RESPONSES}


def _principal(
    headless: Headless, context: JobContext, submitted: Submitted, endpoint: str, now: float
) -> KeySnap:
    try:
        principal = principal_of(headless.snapshot(), submitted.key_digest, context.job.key_id, now)
        # The key's scopes as they stand now, as its status: narrowed since the job was
        # queued, the job does not run.
        scope = _SCOPES.get(endpoint)
        if principal.scopes is not None and scope is not None and scope not in principal.scopes:
            raise scope_refused(principal.scopes, scope)
        return principal
    except GatewayError as error:
        record = record_for(context, submitted, endpoint)
        record.fail(error.status, error.code)
        headless.finish(record)
        raise GiveUp(error.message, result=failure_of(error)) from None


async def cancel_was_asked(context: JobContext) -> bool:
    """After the attempt's task was cancelled: by a cancel the client asked for (True), or
    by the runner stopping or losing the job (False: the next attempt picks it up)."""
    try:
        return await queue.cancel_requested(context.engine, context.id, context.job.epoch)
    except (SQLAlchemyError, OSError) as exc:  # the database is away: the next attempt sees
        log.warning("job_cancel_check_failed", job_id=context.id, error=str(exc))
        return False

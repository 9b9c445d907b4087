"""The `generation` job: a `POST /v1/generate` that named a `webhook_url`, run through the
data plane's headless path as a chat call, its outcome kept (sealed) for
`GET /v1/generate/{id}` and sent to the webhook as one event: `generation.completed` (data:
the generation object) or `generation.failed` (data: the generation with the error in
OpenAI's shape). One event per generation, ever: its id is `evt_` + the job id.
"""

from __future__ import annotations

import time
from typing import Any, Final

from llmrelay.gateway.headless import Headless
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind
from llmrelay.jobs.model_calls import SENT, Submitted, call_model, give_up_lost
from llmrelay.jobs.webhooks import events
from llmrelay.jobs.webhooks.delivery import max_attempts
from llmrelay.metering.estimate import answer_tokens
from llmrelay.protocols import generation
from llmrelay.providers.base import Operation

KIND: Final = "generation"
ENDPOINT: Final = "generate"
COMPLETED: Final = "generation.completed"
FAILED: Final = "generation.failed"


def public_id(job_id: str) -> str:
    return f"gen_{job_id}"


def event_id(job_id: str) -> str:
    return f"evt_{job_id}"


async def run(context: JobContext) -> dict[str, Any] | None:
    submitted = Submitted.of(context.payload)
    headless = Headless(context.services.dispatcher)
    request: dict[str, Any] = context.secret_payload()
    try:
        if (context.checkpoint or {}).get("phase") == SENT:
            raise await give_up_lost(context, headless, submitted, ENDPOINT)
        record, served, answer = await call_model(
            context,
            headless,
            submitted,
            Operation.CHAT,
            generation.chat_request(request),
            endpoint=ENDPOINT,
        )
    except GiveUp as given_up:
        failed = failed_object(context.id, submitted, request, given_up.result or {})
        await _send(context, submitted, request, FAILED, failed)
        raise
    record.take_usage(answer.body.get("usage"))
    if record.usage is None:
        record.answer_tokens = answer_tokens(answer.body)
    usage = record.settle_usage()
    content, finish_reason = generation.completion_parts(answer.body)
    body = generation.generation_body(
        generation_id=public_id(context.id),
        request_id=submitted.request_id,
        created=int(submitted.created_at),
        model=served.name,
        provider=record.provider,
        content=content,
        finish_reason=finish_reason,
        input_tokens=None if usage is None else usage.prompt,
        output_tokens=None if usage is None else usage.output,
        latency_ms=record.latency_ms(),
        metadata=request.get("metadata"),
    )
    headless.keep_bodies(record, request, body)
    headless.finish(record)
    context.seal_result(body)
    await _send(context, submitted, request, COMPLETED, body)
    return {"status": "completed"}


def queued_object(
    job_id: str, submitted: Submitted, request: dict[str, Any], status: str
) -> dict[str, Any]:
    """A generation not done yet (`queued`, `in_progress`), or one cancelled."""
    return {
        "id": public_id(job_id),
        "object": generation.OBJECT,
        "status": status,
        "created": int(submitted.created_at),
        "model": submitted.model,
        "metadata": request.get("metadata") or {},
        "request_id": submitted.request_id,
    }


def failed_object(
    job_id: str, submitted: Submitted, request: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any]:
    error = result.get("error")
    if not isinstance(error, dict):
        error = {"message": "the generation failed", "type": "server_error", "code": "failed"}
    return {
        **queued_object(job_id, submitted, request, "failed"),
        "error": {
            "message": error.get("message"),
            "type": error.get("type", "server_error"),
            "code": error.get("code"),
            "param": error.get("param"),
        },
    }


async def _send(
    context: JobContext,
    submitted: Submitted,
    request: dict[str, Any],
    event_type: str,
    data: dict[str, Any],
) -> None:
    url = request.get(generation.WEBHOOK_FIELD)
    if not isinstance(url, str) or context.sealer is None:
        return
    async with context.engine.begin() as conn:
        await events.enqueue_event(
            conn,
            context.sealer,
            event_id=event_id(context.id),
            event_type=event_type,
            data=data,
            url=url,
            project_id=context.job.project_id,
            tenant_id=context.job.tenant_id,
            source_job_id=context.id,
            now=time.time(),
            max_attempts=max_attempts(context.services.settings),
        )


GENERATION = JobKind(KIND, run, max_attempts=5, keep_expiry=True, timeout_s=None)

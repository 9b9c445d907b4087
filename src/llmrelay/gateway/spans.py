"""A finished request's record as trace spans (observability/tracing.py exports them): the
request with the GenAI attributes of its model call, and one child per upstream attempt.

Attempt times: a request that needed more than one attempt has a row per attempt (with its
end time and latency); one answered by its first attempt has none, and its attempt is drawn
from the request's start to its end."""

from __future__ import annotations

from typing import Any

from llmrelay.gateway.call import CallRecord
from llmrelay.observability.tracing import OPERATIONS, PROVIDER_NAMES, AttemptTiming, Tracing

_NS = 1_000_000_000


def export(tracing: Tracing, record: CallRecord, latency_ms: float) -> None:
    start_ns = int(record.created * _NS)
    end_ns = start_ns + int(latency_ms * 1_000_000)
    operation = OPERATIONS.get(record.endpoint, record.endpoint)
    model = record.virtual_model or ""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": model,
        "gen_ai.request.stream": record.stream,
        "http.response.status_code": record.status_code,
        "llmrelay.request_id": record.request_id,
        "llmrelay.endpoint": record.endpoint,
        "llmrelay.attempts": record.attempts,
        "llmrelay.usage_source": record.usage_source,
    }
    if record.provider_type is not None:
        attributes["gen_ai.provider.name"] = PROVIDER_NAMES.get(
            record.provider_type, record.provider_type
        )
    if record.upstream_model is not None:
        attributes["gen_ai.response.model"] = record.upstream_model
    if record.provider is not None:
        attributes["llmrelay.provider"] = record.provider
    if record.project_id is not None:
        attributes["llmrelay.project_id"] = record.project_id
    if record.ttfb_ms is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = record.ttfb_ms / 1000.0
    if record.error_code is not None:
        attributes["error.type"] = record.error_code
    usage = record.usage
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.prompt
        attributes["gen_ai.usage.output_tokens"] = usage.output
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input
        attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write
        attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning
    attempts: list[AttemptTiming] = []
    if record.attempt_log:
        for row in record.attempt_log:
            # ATTEMPT_COLUMNS: request_id, attempt, created_at (its end), route_id, provider,
            # upstream_model, kind, status_code, outcome, latency_ms
            attempt_end = int(row[2] * _NS)
            attempts.append(
                AttemptTiming(
                    attempt_end - int(row[9] * 1_000_000),
                    attempt_end,
                    {
                        "llmrelay.attempt": row[1],
                        "llmrelay.provider": row[4] or "",
                        "gen_ai.request.model": row[5] or "",
                        "llmrelay.attempt.kind": row[6],
                        "llmrelay.attempt.outcome": row[8],
                        **({"http.response.status_code": row[7]} if row[7] is not None else {}),
                    },
                    row[8] != "ok",
                )
            )
    elif record.attempts:
        attempts.append(
            AttemptTiming(
                start_ns,
                end_ns,
                {
                    "llmrelay.attempt": 1,
                    "llmrelay.provider": record.provider or "",
                    "gen_ai.request.model": record.upstream_model or "",
                    "llmrelay.attempt.kind": "first",
                },
                record.status_code >= 500,
            )
        )
    tracing.request(
        f"{operation} {model}".strip(),
        start_ns,
        end_ns,
        attributes,
        record.status_code >= 500,
        attempts,
    )

"""OpenTelemetry traces, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its traces-only form) is set:
a span per request and a child span per upstream attempt, with the GenAI semantic-convention
attributes (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/).

The spans are written when the request has ended, from what its record already holds (start
time, latency, attempts, usage): the request path does no tracing work at all, and a process
without the variable pays one `is None` check per request. The SDK and the OTLP/HTTP exporter
are an optional extra (`pip install llmrelay[otel]`); the exporter reads the standard
`OTEL_*` variables (headers, timeouts, batching) itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

#: gen_ai.operation.name per record endpoint
OPERATIONS = {
    "chat.completions": "chat",
    "messages": "chat",
    "responses": "chat",
    "responses.compact": "chat",
    "embeddings": "embeddings",
    "messages.count_tokens": "count_tokens",
    "gemini.generate_content": "chat",
    "gemini.count_tokens": "count_tokens",
    "gemini.embed_content": "embeddings",
    "gemini.batch_embed_contents": "embeddings",
}
#: gen_ai.provider.name per provider type (the spec's well-known values where there is one)
PROVIDER_NAMES = {
    "openai": "openai",
    "azure_openai": "azure.ai.openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
}


@dataclass(frozen=True, slots=True)
class AttemptTiming:
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    failed: bool


class Tracing:
    def __init__(self, service_name: str = "llmrelay") -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        resource = Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)}
        )
        # shutdown_on_exit=False: `close` does it, bounded; an atexit hook would wait out
        # the exporter's retries against an unreachable collector.
        self._provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("llmrelay")
        self._kinds = (SpanKind.SERVER, SpanKind.CLIENT)
        self._status = (Status, StatusCode)
        self._in_context = set_span_in_context

    def request(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, Any],
        failed: bool,
        attempts: Sequence[AttemptTiming],
    ) -> None:
        """One finished request and its attempts, as spans with their real times."""
        server, client = self._kinds
        status_type, code = self._status
        span = self._tracer.start_span(
            name, kind=server, start_time=start_ns, attributes=dict(attributes)
        )
        context = self._in_context(span)
        for attempt in attempts:
            child = self._tracer.start_span(
                f"{name} attempt",
                context=context,
                kind=client,
                start_time=attempt.start_ns,
                attributes=dict(attempt.attributes),
            )
            if attempt.failed:
                child.set_status(status_type(code.ERROR))
            child.end(end_time=attempt.end_ns)
        if failed:
            span.set_status(status_type(code.ERROR))
        span.end(end_time=end_ns)

    async def close(self, timeout_s: float) -> None:
        """Export what is buffered, waiting at most `timeout_s`: an unreachable collector
        (the exporter retries for its own timeout) must not hold up a shutdown. A daemon
        thread, so the process can exit while it still tries."""
        done = asyncio.Event()
        loop = asyncio.get_running_loop()

        def shut() -> None:
            try:
                self._provider.shutdown()
            finally:
                loop.call_soon_threadsafe(done.set)

        threading.Thread(target=shut, name="llmrelay-tracing-shutdown", daemon=True).start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)


def from_environment() -> Tracing | None:
    """Tracing when an OTLP endpoint is configured; None otherwise, or (said once in the
    log) when the optional packages are missing."""
    if not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        return None
    try:
        return Tracing()
    except ImportError:
        log.warning(
            "tracing_unavailable",
            reason="OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not "
            "installed: pip install 'llmrelay[otel]'",
        )
        return None

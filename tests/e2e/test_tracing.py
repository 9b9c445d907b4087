"""OpenTelemetry traces: with OTEL_EXPORTER_OTLP_ENDPOINT set, every request reaches a real
OTLP/HTTP receiver as a span with the GenAI attributes and a child span per upstream attempt;
without it, nothing is exported."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.ports import free_port

KEY = "tracing-key-0123456789"


def tracing_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}
  - {{slug: main, type: openai, base_url: "{upstream.base_url}", api_key: sk-x}}
models:
  - {{name: chat, routes: [{{provider: main, upstream_model: cached}}]}}
  - name: failover
    routes:
      - {{provider: up, upstream_model: status-503, priority: 0}}
      - {{provider: main, upstream_model: echo, priority: 1}}
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server
    server.stop()


def wait_for_span(
    receiver: OtlpReceiver, request_id: str
) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    deadline = time.monotonic() + 10
    while True:
        root, children = receiver.by_request(request_id)
        if root is not None or time.monotonic() > deadline:
            assert root is not None, f"no span for {request_id}"
            return root, children
        time.sleep(0.05)


def test_requests_and_attempts_are_exported_as_genai_spans(
    tmp_path: Path, upstream: MockUpstream, receiver: OtlpReceiver
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": "gateway-under-test",
    }
    gateway = GatewayProcess(tmp_path, config=tracing_config(upstream), env=env).start()
    try:
        with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
            plain = client.chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "one two three four"}]
            )
            failover = client.chat.completions.with_raw_response.create(
                model="failover", messages=[{"role": "user", "content": "again"}]
            )
        usage = plain.parse().usage
        assert usage is not None
        root, children = wait_for_span(receiver, plain.headers["x-request-id"])
        assert root.name == "chat chat" and root.service == "gateway-under-test"
        attributes = root.attributes
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.response.model"] == "cached"
        assert attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens
        assert attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == (
            usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        )
        assert attributes["http.response.status_code"] == 200 and not root.error
        assert len(children) == 1 and children[0].trace_id == root.trace_id
        assert root.start_ns <= children[0].start_ns <= children[0].end_ns <= root.end_ns

        root, children = wait_for_span(receiver, failover.headers["x-request-id"])
        assert root.attributes["llmrelay.attempts"] == 2 and not root.error
        assert [c.attributes["llmrelay.attempt.outcome"] for c in children][-1] == "ok"
        assert children[0].error and children[0].attributes["http.response.status_code"] == 503
        assert children[1].attributes["llmrelay.attempt.kind"] == "fallback"
        assert all(c.trace_id == root.trace_id for c in children)
    finally:
        assert gateway.stop() == 0, gateway.logs()


def test_an_unreachable_collector_costs_no_request(tmp_path: Path, upstream: MockUpstream) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": dead, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    gateway = GatewayProcess(tmp_path, config=tracing_config(upstream), env=env).start()
    try:
        with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
            for _ in range(5):
                answer = client.chat.completions.create(
                    model="chat", messages=[{"role": "user", "content": "still served"}]
                )
                assert answer.choices[0].message.content == "still served"
    finally:
        assert gateway.stop(timeout_s=60) == 0, gateway.logs()

"""Every request leaves one record, written off the request path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.e2e.conftest import KEY
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

AUTH = {"Authorization": f"Bearer {KEY}"}


def _send(
    gateway: GatewayProcess, request_id: str, body: dict[str, Any], key: str = KEY
) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Request-ID": request_id},
        json=body,
        timeout=10,
    )


def test_success_stream_and_errors_are_recorded(gateway: GatewayProcess) -> None:
    hi = [{"role": "user", "content": "alpha beta gamma"}]
    assert _send(gateway, "rec-ok", {"model": "chat", "messages": hi}).status_code == 200
    assert (
        _send(
            gateway,
            "rec-stream",
            {
                "model": "chat",
                "messages": hi,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ).status_code
        == 200
    )
    assert (
        _send(
            gateway, "rec-401", {"model": "chat", "messages": hi}, key="nope-nope-nope-nope-1"
        ).status_code
        == 401
    )
    assert _send(gateway, "rec-502", {"model": "failing", "messages": hi}).status_code == 502
    assert (
        _send(gateway, "rec-cut", {"model": "drop", "messages": hi, "stream": True}).status_code
        == 200
    )

    rows = gateway.records(["rec-ok", "rec-stream", "rec-401", "rec-502", "rec-cut"])
    ok = rows["rec-ok"]
    assert (ok["endpoint"], ok["virtual_model"], ok["provider"], ok["upstream_model"]) == (
        "chat.completions",
        "chat",
        "up",
        "echo",
    )
    assert (ok["status_code"], ok["stream"], ok["prompt_tokens"], ok["completion_tokens"]) == (
        200,
        0,
        3,
        3,
    )
    assert ok["project_id"] and ok["key_id"] and ok["tenant_id"]
    assert ok["latency_ms"] > 0 and 0 < ok["ttfb_ms"] <= ok["latency_ms"]

    stream = rows["rec-stream"]
    assert (stream["stream"], stream["status_code"], stream["completion_tokens"]) == (1, 200, 3)

    unauthorised = rows["rec-401"]
    assert (unauthorised["status_code"], unauthorised["error_code"], unauthorised["key_id"]) == (
        401,
        "invalid_api_key",
        None,
    )
    assert (rows["rec-502"]["status_code"], rows["rec-502"]["error_code"]) == (
        502,
        "upstream_error",
    )
    assert (rows["rec-cut"]["status_code"], rows["rec-cut"]["error_code"]) == (
        502,
        "stream_interrupted",
    )


def test_a_repeated_request_id_is_recorded_once(gateway: GatewayProcess) -> None:
    hi = [{"role": "user", "content": "x"}]
    for _ in range(3):
        assert _send(gateway, "rec-dup", {"model": "chat", "messages": hi}).status_code == 200
    rows = gateway.records(["rec-dup"])
    assert len(rows) == 1


def test_a_stream_is_metered_even_when_the_client_asks_for_no_usage(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    """The gateway asks the provider for the usage chunk itself, records the usage, and
    keeps the chunk from a client that did not ask for it."""
    hi = [{"role": "user", "content": "one two three four"}]
    answer = _send(gateway, "rec-quiet", {"model": "chat", "messages": hi, "stream": True})
    assert answer.status_code == 200
    assert answer.text.endswith("data: [DONE]\n\n")
    chunks = [
        orjson.loads(line[6:]) for line in answer.text.split("\n") if line.startswith("data: {")
    ]
    assert all(chunk.get("usage") is None for chunk in chunks)
    assert all(chunk["choices"] for chunk in chunks)  # no usage-only chunk reached the client
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == (
        "one two three four"
    )
    sent = next(
        r
        for r in upstream.chat_requests()
        if {k.lower(): v for k, v in r.headers.items()}.get("x-llmrelay-client-request-id")
        == "rec-quiet"
    )
    assert sent.body["stream_options"] == {"include_usage": True}
    row = gateway.records(["rec-quiet"])["rec-quiet"]
    assert (row["prompt_tokens"], row["completion_tokens"]) == (4, 4)


def test_records_can_be_switched_off_for_benchmarks(tmp_path: Path, upstream: MockUpstream) -> None:
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models: [{{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    gateway = GatewayProcess(tmp_path, config=config, env={"LLMRELAY_RECORD_REQUESTS": "false"})
    gateway.start()
    try:
        body = {"model": "chat", "messages": [{"role": "user", "content": "unrecorded"}]}
        assert _send(gateway, "rec-off-1", body).status_code == 200
    finally:
        assert gateway.stop() == 0  # the queue is drained on the way out: nothing was in it
    assert gateway.records(["rec-off-1"], timeout_s=0.5) == {}

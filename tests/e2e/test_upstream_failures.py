"""What the client sees when a provider fails, slows, cuts or garbles its answer."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import KEY, TIGHT_IDLE_S, TIGHT_TIMEOUT_S, TRICKLE_DEADLINE_S
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "one two three four five"}]
AUTH = {"Authorization": f"Bearer {KEY}"}
#: How long a test allows for what should take a moment (or a limit plus a moment), on a
#: loaded machine. Well under what the alternative takes: the upstreams of these tests answer
#: after a minute or never, and `up`'s own limits are minutes.
PROMPTLY_S = 20


def _wait_for(condition: Callable[[], bool], within_s: float = PROMPTLY_S) -> bool:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _chat(gateway: GatewayProcess, model: str, **extra: object) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers=AUTH,
        json={"model": model, "messages": HI, **extra},
        timeout=60,
    )


def _stream_events(gateway: GatewayProcess, model: str) -> tuple[list[bytes], float]:
    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        headers=AUTH,
        json={"model": model, "messages": HI, "stream": True},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        body = response.read()
    return [e for e in body.split(b"\n\n") if e], time.monotonic() - started


def test_connection_refused_moves_to_the_next_route(gateway: GatewayProcess) -> None:
    response = _chat(gateway, "chat-failover")
    assert response.status_code == 200
    assert response.headers["x-llmrelay-provider"] == "up"
    assert response.json()["model"] == "chat-failover"


def test_upstream_400_is_returned_as_is_without_failover(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    before = len(upstream.requests)
    response = _chat(gateway, "rejects")
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == "context_length_exceeded"
    assert body["request_id"] == response.headers["x-request-id"]
    assert [r.body["model"] for r in upstream.requests[before:]] == ["status-400"]


def test_upstream_401_is_a_502_that_names_the_refusal_never_a_401(gateway: GatewayProcess) -> None:
    response = _chat(gateway, "refused")
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "upstream_refused"
    assert "provider up refused" in error["message"] and "401" in error["message"]
    assert "sk-upstream-abcdef123456" not in response.text  # key-like text is redacted
    assert "127.0.0.1" not in response.text


def test_upstream_500_is_a_502(gateway: GatewayProcess) -> None:
    response = _chat(gateway, "failing")
    assert response.status_code == 502
    assert "answered 500" in response.json()["error"]["message"]


def test_slow_upstream_is_a_504(gateway: GatewayProcess) -> None:
    started = time.monotonic()
    response = _chat(gateway, "slow")
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert TIGHT_TIMEOUT_S - 0.1 < time.monotonic() - started < PROMPTLY_S


def test_redirects_are_not_followed(gateway: GatewayProcess, upstream: MockUpstream) -> None:
    response = _chat(gateway, "redirect")
    assert response.status_code == 502
    assert not any(r.path.startswith("/elsewhere") for r in upstream.requests)


def test_only_disabled_routes_is_503(gateway: GatewayProcess) -> None:
    response = _chat(gateway, "only-disabled")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_available_route"


def test_stream_cut_after_content_ends_with_an_error_event(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="drop", messages=HI, stream=True)
    received: list[str] = []

    def consume() -> None:
        received.extend(chunk.choices[0].delta.content or "" for chunk in stream)

    with pytest.raises(openai.APIError, match="stream broke off"):
        consume()
    assert "".join(received) == "one two "


def test_stream_cut_wire_has_no_done(gateway: GatewayProcess) -> None:
    events, _ = _stream_events(gateway, "drop")
    assert events[-1] != b"data: [DONE]"
    assert b'"error"' in events[-1] and b"stream_interrupted" in events[-1]


def test_stream_cut_before_content_fails_over_invisibly(gateway: GatewayProcess) -> None:
    events, _ = _stream_events(gateway, "drop-early")
    text = b"".join(events)
    assert events[-1] == b"data: [DONE]"
    assert b'"error"' not in text
    assert text.count(b'"role":"assistant"') == 1  # no splice of two answers


def test_stream_stall_after_content_ends_with_a_timeout_event(gateway: GatewayProcess) -> None:
    events, took = _stream_events(gateway, "stall")
    assert b"upstream_timeout" in events[-1]
    assert TIGHT_IDLE_S - 0.1 < took < PROMPTLY_S


def test_complete_stream_without_done_ends_at_once(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    events, took = _stream_events(gateway, "no-done")
    assert events[-1] == b"data: [DONE]"
    assert b'"finish_reason":"stop"' in events[-2]
    assert took < PROMPTLY_S  # not `up`'s silence limit (minutes)
    # the upstream call was closed, not left hanging
    assert _wait_for(lambda: "no-done" in upstream.abandoned)


def test_malformed_event_is_dropped_and_counted(gateway: GatewayProcess) -> None:
    events, _ = _stream_events(gateway, "malformed")
    assert events[-1] == b"data: [DONE]"
    assert all(b"{not json" not in e for e in events)
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'llmrelay_upstream_malformed_events_total{provider="up"} 1.0' in metrics


def test_client_disconnect_cancels_the_upstream_call(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{gateway.base_url}/chat/completions",
            headers=AUTH,
            json={"model": "slow-ok", "messages": HI},
            timeout=httpx.Timeout(60, read=0.1),
        )
    assert _wait_for(lambda: "slow-300" in upstream.abandoned)


def test_client_leaving_a_stream_closes_the_upstream_stream(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        headers=AUTH,
        json={"model": "stall-roomy", "messages": HI, "stream": True},
        timeout=60,
    ) as response:
        first = next(response.iter_bytes())
        assert first.startswith(b"data: ")
    # `up` would wait minutes for the stalled stream: its closing now is the client's doing.
    assert _wait_for(lambda: "stall-after-3" in upstream.abandoned)


def test_a_reset_mid_stream_ends_with_an_error_event_at_once(gateway: GatewayProcess) -> None:
    events, took = _stream_events(gateway, "reset")
    assert events[-1] != b"data: [DONE]"
    assert b"stream_interrupted" in events[-1]
    assert b'"content":"one "' in b"".join(events)  # what came before the reset was relayed
    assert took < PROMPTLY_S  # not `up`'s silence limit (minutes)


def test_a_reset_before_the_answer_fails_over_or_is_a_502(gateway: GatewayProcess) -> None:
    started = time.monotonic()
    served = _chat(gateway, "reset-early")
    assert served.status_code == 200 and served.headers["x-llmrelay-provider"] == "up2"
    events, _ = _stream_events(gateway, "reset-early")
    assert events[-1] == b"data: [DONE]" and b'"error"' not in b"".join(events)
    failed = _chat(gateway, "reset")  # not streamed: reset before any byte, no other route
    assert failed.status_code == 502, failed.text
    assert failed.json()["error"]["type"]
    assert time.monotonic() - started < PROMPTLY_S


def test_a_trickling_answer_is_cut_at_the_models_deadline(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    """Bytes keep coming (every 300 ms, under the silence limit) but the whole answer (an echo
    of 300 words, 16 bytes a piece) would take over a minute: the model's deadline bounds it,
    and the upstream call is closed."""
    long_prompt = [{"role": "user", "content": " ".join(["word"] * 300)}]
    started = time.monotonic()
    response = _chat(gateway, "trickle", messages=long_prompt)
    took = time.monotonic() - started
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert TRICKLE_DEADLINE_S - 0.1 < took < PROMPTLY_S
    assert _wait_for(lambda: "trickle-300" in upstream.abandoned)

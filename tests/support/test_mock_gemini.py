"""The mock upstream's gemini protocol, driven by raw HTTP: the e2e tests of the gateway's
adapter trust this wire format, so it is checked here first."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from tests.support.mock_upstream import MockUpstream
from tests.support.raw_http import read_until_cut, sse_events

GOOGLE_KEY = "AIza-mock-0123456789"


def _gemini(
    upstream: MockUpstream,
    model: str,
    text: str = "one two three four five",
    method: str = "generateContent",
    **body: Any,
) -> httpx2.Response:
    contents = body.pop("contents", [{"role": "user", "parts": [{"text": text}]}])
    return httpx2.post(
        f"{upstream.root_url}/v1beta/models/{model}:{method}",
        json={"contents": contents, **body},
        headers={"x-goog-api-key": GOOGLE_KEY},
        timeout=10,
    )


def test_gemini_generate_content_echoes_the_last_user_turn(upstream: MockUpstream) -> None:
    contents = [
        {"role": "user", "parts": [{"text": "first"}]},
        {"role": "model", "parts": [{"text": "answer"}]},
        {"role": "user", "parts": [{"text": "one two three four five"}]},
    ]
    response = _gemini(upstream, "gemini-x", contents=contents)
    assert response.status_code == 200
    answer = response.json()
    assert answer["candidates"] == [
        {
            "content": {"role": "model", "parts": [{"text": "one two three four five"}]},
            "finishReason": "STOP",
            "index": 0,
        }
    ]
    usage = answer["usageMetadata"]
    assert (usage["promptTokenCount"], usage["candidatesTokenCount"]) == (7, 5)
    assert usage["totalTokenCount"] == 12 and "cachedContentTokenCount" not in usage
    assert answer["modelVersion"] == "gemini-x-2025-01-01" and answer["responseId"]
    sent = upstream.requests[-1]
    assert sent.path == "/v1beta/models/gemini-x:generateContent"
    assert sent.headers["x-goog-api-key"] == GOOGLE_KEY


def test_gemini_system_instruction_reports_cached_tokens(upstream: MockUpstream) -> None:
    system = {"parts": [{"text": "you are an echo"}]}
    usage = _gemini(upstream, "echo", systemInstruction=system).json()["usageMetadata"]
    assert (usage["promptTokenCount"], usage["cachedContentTokenCount"]) == (9, 3)


def test_gemini_sse_stream_is_crlf_framed_with_cumulative_usage(upstream: MockUpstream) -> None:
    response = httpx2.post(
        f"{upstream.root_url}/v1beta/models/echo:streamGenerateContent",
        params={"alt": "sse"},
        json={"contents": [{"role": "user", "parts": [{"text": "one two three four five"}]}]},
        headers={"x-goog-api-key": GOOGLE_KEY},
        timeout=10,
    )
    assert response.headers["content-type"] == "text/event-stream"
    assert response.content.endswith(b"\r\n\r\n")
    chunks = [data for _, data in sse_events(response.content, b"\r\n\r\n")]
    candidates = [c["candidates"][0] for c in chunks]
    assert [c["content"]["parts"][0]["text"] for c in candidates] == [
        "one two ",
        "three four ",
        "five",
    ]
    assert [c.get("finishReason") for c in candidates] == [None, None, "STOP"]
    assert [c["usageMetadata"]["candidatesTokenCount"] for c in chunks] == [2, 4, 5]
    assert len({c["responseId"] for c in chunks}) == 1
    assert upstream.requests[-1].query == {"alt": "sse"}


def test_gemini_stream_without_sse_is_one_json_array(upstream: MockUpstream) -> None:
    chunks = _gemini(upstream, "echo", "a b c", method="streamGenerateContent").json()
    assert isinstance(chunks, list) and len(chunks) == 2
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


def test_gemini_calls_the_first_declared_function(upstream: MockUpstream) -> None:
    tools = [{"functionDeclarations": [{"name": "search"}, {"name": "other"}]}]
    answer = _gemini(upstream, "echo", "call: weather in Paris", tools=tools).json()
    assert answer["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "search", "args": {"query": "weather in Paris"}}}
    ]
    assert answer["candidates"][0]["finishReason"] == "STOP"


def test_gemini_answers_a_function_response(upstream: MockUpstream) -> None:
    contents = [
        {"role": "user", "parts": [{"text": "call: weather"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "search", "args": {}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "search", "response": {"sky": "clear"}}}],
        },
    ]
    answer = _gemini(upstream, "echo", contents=contents).json()
    assert answer["candidates"][0]["content"]["parts"] == [{"text": 'result: {"sky":"clear"}'}]


def test_gemini_answer_longer_than_max_output_tokens_is_cut(upstream: MockUpstream) -> None:
    answer = _gemini(upstream, "echo", generationConfig={"maxOutputTokens": 2}).json()
    candidate = answer["candidates"][0]
    assert candidate["content"]["parts"] == [{"text": "one two"}]
    assert candidate["finishReason"] == "MAX_TOKENS"


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
    ],
)
def test_gemini_status_is_a_google_error(upstream: MockUpstream, status: int, name: str) -> None:
    response = _gemini(upstream, f"status-{status}")
    assert response.status_code == status
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (status, name) and error["message"]


def test_gemini_needs_a_key_in_the_header_or_the_query(upstream: MockUpstream) -> None:
    url = f"{upstream.root_url}/v1beta/models/echo:generateContent"
    body = {"contents": [{"parts": [{"text": "hi"}]}]}
    refused = httpx2.post(url, json=body, timeout=10)
    assert refused.status_code == 403
    assert refused.json()["error"]["status"] == "PERMISSION_DENIED"
    accepted = httpx2.post(url, params={"key": GOOGLE_KEY}, json=body, timeout=10)
    assert accepted.json()["candidates"][0]["content"]["parts"] == [{"text": "hi"}]
    unknown = _gemini(upstream, "echo", method="embedText")
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"


def test_gemini_throttle_first_hints_the_retry_delay(upstream: MockUpstream) -> None:
    throttled = _gemini(upstream, "throttle-first-1-gemini")
    assert throttled.status_code == 429 and "retry-after" not in throttled.headers
    assert throttled.json()["error"]["details"] == [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}
    ]
    assert _gemini(upstream, "throttle-first-1-gemini").status_code == 200
    overloaded = _gemini(upstream, "fail-first-1-gemini")
    assert overloaded.status_code == 503
    assert overloaded.json()["error"]["status"] == "UNAVAILABLE"
    assert _gemini(upstream, "fail-first-1-gemini").status_code == 200


def test_gemini_drop_cuts_the_stream_after_n_events(upstream: MockUpstream) -> None:
    received = read_until_cut(
        f"{upstream.root_url}/v1beta/models/drop-after-1:streamGenerateContent?alt=sse",
        json={"contents": [{"parts": [{"text": "one two three four five"}]}]},
        headers={"x-goog-api-key": GOOGLE_KEY},
    )
    assert received.count(b"data: ") == 1 and b"finishReason" not in received

"""The mock upstream's anthropic, gemini and azure_openai protocols, driven by the official
`anthropic` and `openai` SDKs and by raw HTTP: the e2e tests of the gateway's adapters trust
these wire formats, so they are checked here first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest
from anthropic.types import MessageParam, ToolParam

from tests.support.mock_upstream import MockUpstream

ANTHROPIC_KEY = "sk-ant-mock-0123456789"
GOOGLE_KEY = "AIza-mock-0123456789"
AZURE_KEY = "azure-mock-0123456789"
AZURE_VERSION = "2024-10-21"
HELLO: list[MessageParam] = [{"role": "user", "content": "one two three"}]
TOOLS: list[ToolParam] = [
    {"name": "search", "input_schema": {"type": "object"}},
    {"name": "other", "input_schema": {"type": "object"}},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


@pytest.fixture
def claude(upstream: MockUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=upstream.root_url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=10
    )


def _sse(raw: bytes, separator: bytes = b"\n\n") -> list[tuple[str, dict[str, Any]]]:
    """(event name or "", data) of each server-sent event in `raw`."""
    events = []
    for block in filter(None, raw.split(separator)):
        fields = dict(line.split(": ", 1) for line in block.decode().splitlines())
        events.append((fields.get("event", ""), orjson.loads(fields["data"])))
    return events


def _read_until_cut(url: str, **request: Any) -> bytes:
    """What a streamed answer sent before its connection was cut (which must happen)."""
    chunks: list[bytes] = []
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        httpx2.stream("POST", url, timeout=10, **request) as response,
    ):
        chunks.extend(response.iter_bytes())
    return b"".join(chunks)


# -- anthropic --------------------------------------------------------------------------------


def _anthropic_raw(upstream: MockUpstream, body: dict[str, Any], **headers: str) -> httpx2.Response:
    headers = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01", **headers}
    return httpx2.post(f"{upstream.root_url}/v1/messages", json=body, headers=headers, timeout=10)


def test_anthropic_message_echoes_the_last_user_turn(
    claude: anthropic.Anthropic, upstream: MockUpstream
) -> None:
    messages: list[MessageParam] = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "one two three"},
    ]
    message = claude.messages.create(model="claude-x", max_tokens=50, messages=messages)
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.role == "assistant" and message.model == "claude-x-20250101"
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [
        ("text", "one two three")
    ]
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    assert message.usage.input_tokens == 7 and message.usage.output_tokens == 3
    assert message.usage.cache_read_input_tokens == 0
    assert message._request_id is not None and message._request_id.startswith("req_")
    sent = upstream.requests[-1]
    assert sent.path == "/v1/messages" and sent.body["model"] == "claude-x"
    assert sent.headers["Authorization"] == f"Bearer {ANTHROPIC_KEY}"
    assert sent.headers["anthropic-version"]


def test_anthropic_system_prompt_reads_three_tokens_from_the_cache(
    claude: anthropic.Anthropic,
) -> None:
    message = claude.messages.create(
        model="echo",
        max_tokens=50,
        system=[{"type": "text", "text": "you are a careful echo"}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "alpha beta"}]}],
    )
    assert message.content[0].type == "text" and message.content[0].text == "alpha beta"
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (4, 3)  # 7 words in all
    assert usage.cache_creation_input_tokens == 0


def test_anthropic_answer_longer_than_max_tokens_is_cut(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model="echo", max_tokens=2, messages=HELLO)
    assert message.content[0].type == "text" and message.content[0].text == "one two"
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 2


def test_anthropic_stream_is_the_documented_event_sequence(upstream: MockUpstream) -> None:
    response = _anthropic_raw(
        upstream, {"model": "echo", "max_tokens": 50, "messages": HELLO, "stream": True}
    )
    assert response.headers["content-type"] == "text/event-stream"
    events = _sse(response.content)
    assert all(data["type"] == name for name, data in events)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 3
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    assert "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta") == (
        "one two three"
    )
    assert events[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2][1]["usage"] == {"output_tokens": 3}


def test_anthropic_sdk_streams_text_and_the_final_message(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model="echo", max_tokens=50, messages=HELLO) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert pieces == ["one ", "two ", "three"]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 3


def test_anthropic_calls_the_first_tool(claude: anthropic.Anthropic) -> None:
    call: list[MessageParam] = [{"role": "user", "content": "call: weather in Paris"}]
    message = claude.messages.create(model="echo", max_tokens=50, tools=TOOLS, messages=call)
    block = message.content[0]
    assert block.type == "tool_use" and block.id.startswith("toolu_")
    assert (block.name, block.input) == ("search", {"query": "weather in Paris"})
    assert message.stop_reason == "tool_use"
    with claude.messages.stream(model="echo", max_tokens=50, tools=TOOLS, messages=call) as s:
        streamed = s.get_final_message()
    assert streamed.content[0].type == "tool_use"
    assert streamed.content[0].input == {"query": "weather in Paris"}
    assert streamed.stop_reason == "tool_use"


def test_anthropic_streams_tool_input_as_partial_json(upstream: MockUpstream) -> None:
    body = {
        "model": "echo",
        "max_tokens": 50,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "call: news"}],
        "stream": True,
    }
    events = _sse(_anthropic_raw(upstream, body).content)
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use" and block["input"] == {} and block["name"] == "search"
    pieces = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"]
    assert len(pieces) >= 2
    assert orjson.loads("".join(pieces)) == {"query": "news"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_answers_a_tool_result(claude: anthropic.Anthropic) -> None:
    messages: list[MessageParam] = [
        {"role": "user", "content": "call: weather"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
    ]
    message = claude.messages.create(model="echo", max_tokens=50, tools=TOOLS, messages=messages)
    assert message.content[0].type == "text" and message.content[0].text == "result: sunny"
    assert message.stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("status", "error", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
        (403, anthropic.PermissionDeniedError, "permission_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (413, anthropic.ContentTooLargeError, "request_too_large"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_anthropic_status_has_the_api_error_type(
    claude: anthropic.Anthropic, status: int, error: type[anthropic.APIStatusError], error_type: str
) -> None:
    with pytest.raises(error) as raised:
        claude.messages.create(model=f"status-{status}", max_tokens=5, messages=HELLO)
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["request_id"] == raised.value.response.headers["request-id"]


def test_anthropic_fail_first_is_overloaded_and_throttle_first_says_when(
    claude: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.OverloadedError):
        claude.messages.create(model="fail-first-1-claude", max_tokens=5, messages=HELLO)
    assert claude.messages.create(model="fail-first-1-claude", max_tokens=5, messages=HELLO)
    with pytest.raises(anthropic.RateLimitError) as raised:
        claude.messages.create(model="throttle-first-1-claude", max_tokens=5, messages=HELLO)
    assert raised.value.response.headers["retry-after"] == "1"
    assert claude.messages.create(model="throttle-first-1-claude", max_tokens=5, messages=HELLO)


def test_anthropic_needs_a_key_and_a_version(upstream: MockUpstream) -> None:
    body = {"model": "echo", "max_tokens": 5, "messages": HELLO}
    no_key = _anthropic_raw(upstream, body, **{"x-api-key": ""})
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    no_version = _anthropic_raw(upstream, body, **{"anthropic-version": ""})
    assert no_version.status_code == 400
    assert no_version.json()["error"]["type"] == "invalid_request_error"


def test_anthropic_overload_midstream_is_an_error_event(claude: anthropic.Anthropic) -> None:
    received: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        claude.messages.stream(model="overloaded-midstream", max_tokens=50, messages=HELLO) as s,
    ):
        received.extend(s.text_stream)
    assert received == ["one "]
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


def test_anthropic_drop_cuts_the_stream_after_n_deltas(upstream: MockUpstream) -> None:
    body = {"model": "drop-after-1", "max_tokens": 50, "messages": HELLO, "stream": True}
    headers = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
    received = _read_until_cut(f"{upstream.root_url}/v1/messages", json=body, headers=headers)
    assert received.count(b"event: content_block_delta") == 1
    assert b"message_stop" not in received


def test_anthropic_slow_waits_before_answering(claude: anthropic.Anthropic) -> None:
    started = time.monotonic()
    claude.messages.create(model="slow-300", max_tokens=5, messages=HELLO)
    assert time.monotonic() - started >= 0.3


def test_anthropic_counts_tokens(claude: anthropic.Anthropic, upstream: MockUpstream) -> None:
    counted = claude.messages.count_tokens(model="echo", system="be brief", messages=HELLO)
    assert counted.input_tokens == 5
    assert upstream.requests[-1].path == "/v1/messages/count_tokens"


# -- gemini -----------------------------------------------------------------------------------


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
    chunks = [data for _, data in _sse(response.content, b"\r\n\r\n")]
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
    received = _read_until_cut(
        f"{upstream.root_url}/v1beta/models/drop-after-1:streamGenerateContent?alt=sse",
        json={"contents": [{"parts": [{"text": "one two three four five"}]}]},
        headers={"x-goog-api-key": GOOGLE_KEY},
    )
    assert received.count(b"data: ") == 1 and b"finishReason" not in received


# -- azure_openai -----------------------------------------------------------------------------


def _azure(upstream: MockUpstream, deployment: str, **body: Any) -> httpx2.Response:
    return httpx2.post(
        f"{upstream.root_url}/openai/deployments/{deployment}/chat/completions",
        params={"api-version": AZURE_VERSION},
        json={"messages": [{"role": "user", "content": "one two three"}], **body},
        headers={"api-key": AZURE_KEY},
        timeout=10,
    )


def test_azure_deployment_is_the_model_when_the_body_names_none(upstream: MockUpstream) -> None:
    answer = _azure(upstream, "fail-first-1-azure")
    assert answer.status_code == 503  # the deployment's behaviour, with the OpenAI error body
    assert answer.json()["error"]["type"] == "upstream_test"
    answer = _azure(upstream, "fail-first-1-azure")
    assert answer.json()["choices"][0]["message"]["content"] == "one two three"
    assert answer.json()["model"] == "fail-first-1-azure-2024-07-18"
    sent = upstream.requests[-1]
    assert sent.path == "/openai/deployments/fail-first-1-azure/chat/completions"
    assert "model" not in sent.body
    assert sent.query == {"api-version": AZURE_VERSION} and sent.headers["api-key"] == AZURE_KEY


def test_azure_streams_like_openai(upstream: MockUpstream) -> None:
    response = _azure(upstream, "gpt-4o", stream=True)
    events = response.content.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    pieces = [orjson.loads(e[6:])["choices"][0]["delta"].get("content") for e in events[:-2]]
    assert "".join(p for p in pieces if p) == "one two three"


def test_azure_sdk_chats_and_embeds(upstream: MockUpstream) -> None:
    client = openai.AzureOpenAI(
        azure_endpoint=upstream.root_url,
        api_key=AZURE_KEY,
        api_version=AZURE_VERSION,
        max_retries=0,
        timeout=10,
    )
    chat = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hello azure"}]
    )
    assert chat.choices[0].message.content == "hello azure"
    embedding = client.embeddings.create(model="embedder", input="four")
    assert embedding.data[0].embedding == [4.0, 0.5, -0.25]
    assert upstream.requests[-1].path == "/openai/deployments/embedder/embeddings"
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="content-filter", messages=[{"role": "user", "content": "x"}]
        )
    assert raised.value.code == "content_filter"


def test_azure_content_filter_is_the_documented_400(upstream: MockUpstream) -> None:
    response = _azure(upstream, "gpt-4o", model="content-filter")
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"], error["status"]) == (
        "content_filter",
        "prompt",
        None,
        400,
    )
    assert error["message"].startswith("The response was filtered due to the prompt triggering")
    assert error["innererror"]["code"] == "ResponsibleAIPolicyViolation"
    assert error["innererror"]["content_filter_result"] == {
        "hate": {"filtered": True, "severity": "high"},
        "self_harm": {"filtered": False, "severity": "safe"},
        "sexual": {"filtered": False, "severity": "safe"},
        "violence": {"filtered": False, "severity": "safe"},
    }


def test_azure_needs_a_key_and_an_api_version(upstream: MockUpstream) -> None:
    url = f"{upstream.root_url}/openai/deployments/gpt-4o/chat/completions"
    body = {"messages": [{"role": "user", "content": "x"}]}
    no_key = httpx2.post(url, params={"api-version": AZURE_VERSION}, json=body, timeout=10)
    assert no_key.status_code == 401
    assert no_key.json()["error"]["code"] == "401"
    assert no_key.json()["error"]["message"].startswith("Access denied")
    no_version = httpx2.post(url, headers={"api-key": AZURE_KEY}, json=body, timeout=10)
    assert no_version.status_code == 404
    assert no_version.json() == {"error": {"code": "404", "message": "Resource not found"}}

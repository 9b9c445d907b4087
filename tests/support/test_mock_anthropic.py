"""The mock upstream's anthropic protocol, driven by the official `anthropic` SDK and by raw
HTTP: the e2e tests of the gateway's adapter trust this wire format, so it is checked here
first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from anthropic.types import MessageParam, ToolParam

from tests.support.mock_upstream import MockUpstream
from tests.support.raw_http import read_until_cut, sse_events

ANTHROPIC_KEY = "sk-ant-mock-0123456789"
HELLO: list[MessageParam] = [{"role": "user", "content": "one two three"}]
TOOLS: list[ToolParam] = [
    {"name": "search", "input_schema": {"type": "object"}},
    {"name": "other", "input_schema": {"type": "object"}},
]


@pytest.fixture
def claude(upstream: MockUpstream) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=upstream.root_url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=60
    ) as made:
        yield made


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
    events = sse_events(response.content)
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
    events = sse_events(_anthropic_raw(upstream, body).content)
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
    received = read_until_cut(f"{upstream.root_url}/v1/messages", json=body, headers=headers)
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

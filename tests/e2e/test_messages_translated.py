"""Anthropic Messages clients reaching OpenAI-protocol and Gemini providers with the newest
parts of the API, through a real gateway process: what Claude Code sends (its captured
request) is translated, not refused; what was left out is named in `x-llmrelay-dropped`; and
a reasoning model's thinking comes back as signed thinking blocks that carry it upstream on
the next turn (OpenAI-compatible `reasoning_content`, Gemini's thought signatures), streamed
and not. The providers are real servers on loopback (tests/support/mock_upstream.py,
tests/support/thinking_upstream.py); the client is the official anthropic SDK or raw HTTP."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam, ToolParam

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.thinking_upstream import SIGNATURE, THOUGHT, ThinkingUpstream

KEY = "e2e-messages-translated-0123456789"
SECRET = "sk-provider-secret-translated"
CAPTURED = Path(__file__).parent.parent / "agents" / "captured" / "claude-code-tool.json"
TOOL: ToolParam = {
    "name": "Bash",
    "description": "Runs a command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
ASK: MessageParam = {"role": "user", "content": "List the files."}


@pytest.fixture(scope="module")
def thinking() -> Iterator[ThinkingUpstream]:
    server = ThinkingUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, thinking: ThinkingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    root, think = upstream.root_url, thinking.root_url
    config = f"""
providers:
  - {{slug: compat, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: openai, type: openai, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: think-compat, type: openai_compatible, base_url: "{think}/v1", api_key: {SECRET}}}
  - {{slug: think-openai, type: openai, base_url: "{think}/v1", api_key: {SECRET}}}
  - {{slug: think-google, type: gemini, base_url: "{think}", api_key: {SECRET}}}
models:
  - {{name: compat, routes: [{{provider: compat, upstream_model: echo}}]}}
  - {{name: claude, routes: [{{provider: claude, upstream_model: claude-test}}]}}
  - {{name: gemini, routes: [{{provider: google, upstream_model: gemini-test}}]}}
  - {{name: gpt41, routes: [{{provider: openai, upstream_model: gpt-4.1}}]}}
  - {{name: think-compat, routes: [{{provider: think-compat, upstream_model: r1}}]}}
  - {{name: think-openai, routes: [{{provider: think-openai, upstream_model: o-model}}]}}
  - {{name: think-gemini, routes: [{{provider: think-google, upstream_model: gemini-think}}]}}
projects:
  - name: translated
    keys: [{{name: k, key: {KEY}}}]
"""
    yield from serving(tmp_path_factory.mktemp("messages-translated"), config)


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key=KEY, base_url=gateway.url, max_retries=0, timeout=15) as made:
        yield made


def claude_code_request() -> tuple[dict[str, str], dict[str, Any]]:
    """Claude Code's first request of a tool task, headers and body as it sent them."""
    exchange = json.loads(CAPTURED.read_text())["exchanges"][0]
    sent = exchange["headers"]
    headers = {k: sent[k] for k in ("anthropic-version", "anthropic-beta", "User-Agent")}
    return {**headers, "x-api-key": KEY}, copy.deepcopy(exchange["body"])


def _upstream_body(upstream: MockUpstream, fragment: str) -> dict[str, Any]:
    return [r for r in upstream.requests if fragment in r.path][-1].body


@pytest.mark.parametrize("model", ["compat", "gemini"])
def test_claude_codes_request_is_translated_and_the_dropped_fields_named(
    gateway: GatewayProcess, upstream: MockUpstream, model: str
) -> None:
    headers, body = claude_code_request()
    body["model"] = model
    late_system = body["messages"][1]["content"][0]["text"]
    with httpx.stream(
        "POST", f"{gateway.url}/v1/messages", headers=headers, json=body, timeout=15
    ) as response:
        text = response.read().decode()
    assert response.status_code == 200, text
    assert "event: message_stop" in text
    dropped = response.headers["x-llmrelay-dropped"].split(",")
    expected = ["context_management", "cache_control", "tools.defer_loading"]
    if model == "gemini":
        expected.append("metadata.user_id")  # Gemini has no user id
    assert dropped == expected
    received = [r for r in upstream.requests if "GenerateContent" in r.path or "/chat/" in r.path]
    beta = {k.lower() for k in received[-1].headers} & {"anthropic-beta", "anthropic-version"}
    assert not beta  # Anthropic's headers mean nothing to another provider
    if model == "compat":
        sent = _upstream_body(upstream, "/chat/completions")
        assert sent["reasoning_effort"] == "high"
        assert [m["role"] for m in sent["messages"]] == ["system", "user"]
        assert sent["messages"][0]["content"][-1]["text"] == late_system
        assert "output_config" not in sent and "thinking" not in sent
    else:
        sent = _upstream_body(upstream, ":streamGenerateContent")
        assert sent["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 24576}
        assert sent["systemInstruction"]["parts"][-1]["text"] == late_system
        assert [c["role"] for c in sent["contents"]] == ["user"]


def test_a_model_that_does_not_reason_gets_no_effort_and_the_header_says_so(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    headers, body = claude_code_request()
    body["model"] = "gpt41"
    response = httpx.post(f"{gateway.url}/v1/messages", headers=headers, json=body, timeout=15)
    assert response.status_code == 200, response.text
    dropped = response.headers["x-llmrelay-dropped"].split(",")
    assert dropped == [
        "context_management",
        "cache_control",
        "tools.defer_loading",
        "output_config.effort",
    ]
    sent = _upstream_body(upstream, "/chat/completions")
    assert sent["model"] == "gpt-4.1" and "reasoning_effort" not in sent


@pytest.mark.parametrize("model", ["compat", "gemini"])
def test_structured_output_is_translated_and_a_server_tool_left_out(
    client: anthropic.Anthropic, upstream: MockUpstream, model: str
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    raw = client.messages.with_raw_response.create(
        model=model,
        max_tokens=50,
        messages=[{"role": "user", "content": "hi"}],
        tools=[TOOL, {"type": "web_search_20250305", "name": "web_search"}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-llmrelay-dropped"] == "web_search"
    if model == "compat":
        sent = _upstream_body(upstream, "/chat/completions")
        assert sent["response_format"]["json_schema"]["schema"] == schema
        assert [t["function"]["name"] for t in sent["tools"]] == ["Bash"]
    else:
        sent = _upstream_body(upstream, ":generateContent")
        assert sent["generationConfig"]["responseJsonSchema"] == schema
        names = [d["name"] for d in sent["tools"][0]["functionDeclarations"]]
        assert names == ["Bash"]


def test_nothing_dropped_means_no_header(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model="compat", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert "x-llmrelay-dropped" not in raw.headers


def _first_turn(client: anthropic.Anthropic, model: str, stream: bool) -> list[Any]:
    """The assistant content of the first turn (thinking, then the tool call)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": 200,
        "messages": [ASK],
        "tools": [TOOL],
        "thinking": {"type": "adaptive"},
    }
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    return [block.model_dump(exclude_none=True) for block in message.content]


def _second_turn(
    client: anthropic.Anthropic, model: str, content: list[Any], stream: bool
) -> tuple[str, Any]:
    use = next(b for b in content if b["type"] == "tool_use")
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "a.txt"}
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": 200,
        "messages": [
            ASK,
            {"role": "assistant", "content": content},
            {"role": "user", "content": [result]},
        ],
        "tools": [TOOL],
        "thinking": {"type": "adaptive"},
    }
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
            headers = events.response.headers
    else:
        raw = client.messages.with_raw_response.create(**kwargs)
        message, headers = raw.parse(), raw.headers
    text = "".join(b.text for b in message.content if b.type == "text")
    return text, headers


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_reasoning_content_round_trips_through_thinking_blocks(
    client: anthropic.Anthropic, thinking: ThinkingUpstream, stream: bool
) -> None:
    content = _first_turn(client, "think-compat", stream)
    assert [b["type"] for b in content] == ["thinking", "tool_use"]
    assert content[0]["thinking"] == THOUGHT
    assert content[0]["signature"].startswith("llmrelay.thinking.v1.")
    text, headers = _second_turn(client, "think-compat", content, stream)
    assert text == "The tool said: a.txt"
    assert "x-llmrelay-dropped" not in headers
    assistant = thinking.last("/chat/completions")["messages"][1]
    assert assistant["reasoning_content"] == THOUGHT
    assert assistant["tool_calls"][0]["id"] == content[1]["id"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_geminis_thought_signature_round_trips_through_thinking_blocks(
    client: anthropic.Anthropic, thinking: ThinkingUpstream, stream: bool
) -> None:
    content = _first_turn(client, "think-gemini", stream)
    kinds = [b["type"] for b in content]
    assert kinds[0] == "thinking" and "tool_use" in kinds
    text, _ = _second_turn(client, "think-gemini", content, stream)
    assert text.startswith("The tool said: ")
    model_turn = thinking.last("/v1beta/models/")["contents"][1]
    assert model_turn["role"] == "model"
    call = next(p for p in model_turn["parts"] if "functionCall" in p)
    assert call["thoughtSignature"] == SIGNATURE  # Gemini's own, not the skip placeholder
    thoughts = [p for p in model_turn["parts"] if p.get("thought")]
    assert thoughts == [{"text": THOUGHT, "thought": True}]


def test_openais_own_api_gets_no_reasoning_fields_and_the_header_says_so(
    client: anthropic.Anthropic, thinking: ThinkingUpstream
) -> None:
    content = _first_turn(client, "think-openai", stream=False)
    assert content[0]["type"] == "thinking"
    _, headers = _second_turn(client, "think-openai", content, stream=False)
    assistant = thinking.last("/chat/completions")["messages"][1]
    assert "reasoning_content" not in assistant
    assert headers["x-llmrelay-dropped"] == "messages.content.thinking"


def test_a_conversation_moved_to_an_anthropic_model_leaves_llmrelays_thinking_out(
    client: anthropic.Anthropic, upstream: MockUpstream
) -> None:
    """A client that switches models mid-conversation (Claude Code's /model): Anthropic would
    refuse the signatures of thinking blocks llmrelay made, so they are taken out."""
    first = client.messages.create(model="think-compat", max_tokens=50, messages=[ASK])
    content = [block.model_dump(exclude_none=True) for block in first.content]
    assert [b["type"] for b in content] == ["thinking", "text"]
    history: list[Any] = [ASK, {"role": "assistant", "content": content}]
    raw = client.messages.with_raw_response.create(
        model="claude", max_tokens=50, messages=[*history, {"role": "user", "content": "more"}]
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-llmrelay-dropped"] == "messages.content.thinking"
    sent = _upstream_body(upstream, "/v1/messages")
    assert sent["messages"][1]["content"] == [content[1]]

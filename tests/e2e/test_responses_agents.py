"""A Responses client shaped like Codex (the official openai SDK, streamed, with a namespace
tool, OpenAI's web_search and a reasoning effort) through a real gateway process to Anthropic
and Gemini providers, over real sockets: a scripted upstream (tests/support/
reasoning_upstream.py) thinks (Anthropic thinking blocks with signatures, Gemini thought
signatures) and calls the shell tool; the client gets reasoning items whose encrypted_content
it sends back, and the next turn reaches the upstream with the provider's own reasoning in
place (the upstream refuses it otherwise, as the real APIs do). What was left out is named in
`x-llmrelay-dropped`; what a provider cannot do at all is a 400 in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.reasoning_upstream import SIGNATURE, THOUGHT_SIGNATURE, ScriptedUpstream

KEY = "e2e-responses-agents-key-0123456789"
SECRET = "sk-provider-secret-agents"
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Runs a command.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    },
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Tools for sub-agents.",
        "tools": [
            {
                "type": "function",
                "name": "close_agent",
                "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
            }
        ],
    },
    {"type": "web_search", "external_web_access": True},
]


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(command="echo hi") as upstream:
        yield upstream


@pytest.fixture(scope="module")
def gateway(
    scripted: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    root = scripted.root_url
    config = f"""
providers:
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
models:
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: gemini
    routes: [{{provider: google, upstream_model: gemini-test}}]
projects:
  - name: agents
    keys: [{{name: k, key: {KEY}}}]
"""
    yield from serving(tmp_path_factory.mktemp("responses-agents"), config)


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0) as c:
        yield c


def first_turn(client: openai.OpenAI, model: str) -> tuple[list[dict[str, Any]], str]:
    """Codex's first request, streamed: the completed response's output, and the dropped
    header."""
    raw = client.responses.with_raw_response.create(
        model=model,
        input=[{"role": "user", "content": "Run `echo hi` and tell me what it printed."}],
        tools=TOOLS,
        tool_choice="auto",
        parallel_tool_calls=True,
        reasoning={"effort": "medium", "summary": "auto"},
        store=False,
        include=["reasoning.encrypted_content"],
        prompt_cache_key="session-1",
        stream=True,
    )
    completed = None
    with raw.parse() as events:
        for event in events:
            if event.type == "response.completed":
                completed = event.response
    assert completed is not None
    assert completed.model == model
    output = [item.model_dump(exclude_none=True) for item in completed.output]
    return output, raw.headers.get("x-llmrelay-dropped", "")


def second_turn(client: openai.OpenAI, model: str, output: list[dict[str, Any]]) -> str:
    call = next(item for item in output if item["type"] == "function_call")
    history: list[Any] = [
        {"role": "user", "content": "Run `echo hi` and tell me what it printed."},
        *output,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "hi"},
    ]
    answer = client.responses.create(
        model=model,
        input=history,
        tools=TOOLS,
        reasoning={"effort": "medium", "summary": "auto"},
        store=False,
        include=["reasoning.encrypted_content"],
    )
    return answer.output_text


def test_codex_through_anthropic_keeps_its_thinking_across_the_tool_loop(
    client: openai.OpenAI, scripted: ScriptedUpstream
) -> None:
    upstream = scripted
    output, dropped = first_turn(client, "claude")
    sent = upstream.last("messages")
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    names = [tool["name"] for tool in sent["tools"]]
    assert names == ["exec_command", "multi_agent_v1__close_agent"]  # no web_search
    assert set(dropped.split(",")) >= {"tools.web_search", "prompt_cache_key"}
    reasoning, call = output
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Run it."}]
    assert (call["type"], call["name"], call["call_id"]) == (
        "function_call",
        "exec_command",
        "toolu_1",
    )

    assert second_turn(client, "claude", output) == "It printed hi."
    sent = upstream.last("messages")
    assistant = sent["messages"][-2]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "Run it.",
        "signature": SIGNATURE,
    }
    assert assistant["content"][1]["type"] == "tool_use"
    assert sent["thinking"]["type"] == "enabled"


def test_codex_through_gemini_sends_the_call_signature_back(
    client: openai.OpenAI, scripted: ScriptedUpstream
) -> None:
    upstream = scripted
    output, dropped = first_turn(client, "gemini")
    sent = upstream.last("gemini")
    assert sent["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 8192}
    declared = [d["name"] for d in sent["tools"][0]["functionDeclarations"]]
    assert declared == ["exec_command", "multi_agent_v1__close_agent"]
    assert "tools.web_search" in dropped.split(",")
    assert [item["type"] for item in output] == ["reasoning", "function_call", "reasoning"]

    assert second_turn(client, "gemini", output).startswith("It printed")
    sent = upstream.last("gemini")
    model_turn = sent["contents"][-2]
    assert model_turn["role"] == "model"
    call_part = next(p for p in model_turn["parts"] if "functionCall" in p)
    assert call_part["thoughtSignature"] == THOUGHT_SIGNATURE


def test_what_a_provider_cannot_do_at_all_is_a_400_naming_the_field(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="claude",
            input="search the web",
            tools=TOOLS,
            tool_choice={"type": "web_search_preview"},
        )
    assert refused.value.param == "tool_choice"
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"

"""A Responses client shaped like Codex (the official openai SDK, streamed, with a namespace
tool, OpenAI's web_search and a reasoning effort) through a real gateway process to Anthropic
and Gemini providers, over real sockets: a scripted upstream thinks (Anthropic thinking
blocks with signatures, Gemini thought signatures) and calls the shell tool; the client gets
reasoning items whose encrypted_content it sends back, and the next turn reaches the upstream
with the provider's own reasoning in place. What was left out is named in
`x-llmrelay-dropped`; what a provider cannot do at all is a 400 in OpenAI's shape."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.asgi_server import ServedApp
from tests.support.gateway_process import GatewayProcess, serving

KEY = "e2e-responses-agents-key-0123456789"
SECRET = "sk-provider-secret-agents"
SIGNATURE = "EqQBCkYIBxgCKkDscripted-signature"
THOUGHT_SIGNATURE = "CiQBscripted-gemini-call-signature"
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


class ScriptedUpstream:
    """Anthropic Messages and Gemini streamGenerateContent: a first turn that thinks and
    calls `exec_command`, a second (a tool result in the request) that answers with it."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1beta/models/{rest:path}", self.gemini, methods=["POST"]),
            ]
        )

    def last(self, path: str) -> dict[str, Any]:
        with self._lock:
            return [body for where, body in self.bodies if where == path][-1]

    async def messages(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.bodies.append(("messages", body))
        last = body["messages"][-1]["content"]
        result = next(
            (b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"), None
        )
        blocks: list[dict[str, Any]]
        if result is not None:
            blocks = [{"type": "text", "text": f"It printed {result['content']}."}]
        else:
            blocks = [
                {"type": "thinking", "thinking": "Run it.", "signature": SIGNATURE},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "exec_command",
                    "input": {"cmd": "echo hi"},
                },
            ]
        stop = "end_turn" if result is not None else "tool_use"
        usage = {"input_tokens": 20, "output_tokens": 7}
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return JSONResponse(message)
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"message": {**message, "content": [], "stop_reason": None}})
        ]
        for index, block in enumerate(blocks):
            start: dict[str, Any]
            deltas: list[dict[str, Any]]
            if block["type"] == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ]
            elif block["type"] == "tool_use":
                start = {**block, "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
            else:
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": block["text"]}]
            events.append(("content_block_start", {"index": index, "content_block": start}))
            events += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
            events.append(("content_block_stop", {"index": index}))
        events.append(("message_delta", {"delta": {"stop_reason": stop}, "usage": usage}))
        events.append(("message_stop", {}))
        text = "".join(
            f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"
            for name, data in events
        )
        return StreamingResponse(iter([text.encode()]), media_type="text/event-stream")

    async def gemini(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.bodies.append(("gemini", body))
        last = body["contents"][-1]["parts"]
        answered = next((p for p in last if "functionResponse" in p), None)
        if answered is not None:
            output = answered["functionResponse"]["response"]
            parts: list[dict[str, Any]] = [{"text": f"It printed {json.dumps(output)}."}]
        else:
            parts = [
                {"text": "Run it.", "thought": True},
                {
                    "functionCall": {"name": "exec_command", "args": {"cmd": "echo hi"}},
                    "thoughtSignature": THOUGHT_SIGNATURE,
                },
            ]
        event = {
            "responseId": "r1",
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 7},
        }
        if request.url.path.endswith(":generateContent"):
            return JSONResponse(event)
        data = f"data: {json.dumps(event)}\n\n".encode()
        return StreamingResponse(iter([data]), media_type="text/event-stream")


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[ScriptedUpstream, ServedApp]]:
    upstream = ScriptedUpstream()
    with ServedApp(upstream.app) as served:
        yield upstream, served


@pytest.fixture(scope="module")
def gateway(
    scripted: tuple[ScriptedUpstream, ServedApp], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    root = f"http://127.0.0.1:{scripted[1].port}"
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
    client: openai.OpenAI, scripted: tuple[ScriptedUpstream, ServedApp]
) -> None:
    upstream = scripted[0]
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
    client: openai.OpenAI, scripted: tuple[ScriptedUpstream, ServedApp]
) -> None:
    upstream = scripted[0]
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

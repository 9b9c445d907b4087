"""The scripted agent upstream's wire formats, proven with the official SDKs as clients (their
stream accumulators check the event sequences), and raw HTTP where there is no SDK (Gemini)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.support.agent_upstream import AgentUpstream

ASK = "Run the shell command `echo AGENT-abc123` and tell me what it printed."
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[AgentUpstream]:
    server = AgentUpstream().start()
    yield server
    server.stop()


@pytest.fixture
def oai(upstream: AgentUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="sk-test", base_url=upstream.base_url, max_retries=0) as client:
        yield client


@pytest.fixture
def claude(upstream: AgentUpstream) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        api_key="sk-test", base_url=upstream.root_url, max_retries=0
    ) as client:
        yield client


def test_chat_completions_calls_the_tool_then_answers(
    oai: openai.OpenAI, upstream: AgentUpstream
) -> None:
    tools: Any = [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}]
    messages: list[Any] = [{"role": "user", "content": ASK}]
    first = oai.chat.completions.create(model="m", messages=messages, tools=tools)
    assert first.choices[0].finish_reason == "tool_calls"
    call = (first.choices[0].message.tool_calls or [])[0]
    assert call.type == "function"
    assert call.function.name == "bash"
    assert json.loads(call.function.arguments) == {"command": "echo AGENT-abc123"}
    assert first.usage is not None and first.usage.prompt_tokens > 0
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "AGENT-abc123\n"},
    ]
    with oai.chat.completions.stream(
        model="m", messages=messages, tools=tools, stream_options={"include_usage": True}
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "The command printed AGENT-abc123."
    assert final.usage is not None and final.usage.completion_tokens > 0
    assert upstream.requests[-1].streamed
    assert upstream.requests[-1].answer == "text: The command printed AGENT-abc123."


def test_chat_completions_streams_a_tool_call_in_pieces(oai: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}]
    with oai.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": ASK}], tools=tools
    ) as stream:
        final = stream.get_final_completion()
    call = (final.choices[0].message.tool_calls or [])[0]
    assert json.loads(call.function.arguments) == {"command": "echo AGENT-abc123"}
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_completions_json_schema_output(oai: openai.OpenAI) -> None:
    answer = oai.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Title?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}},
    )
    assert json.loads(answer.choices[0].message.content or "") == {"command": "ok"}


def test_responses_function_call_then_answer_streamed(oai: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", "name": "shell", "parameters": SCHEMA, "strict": False}]
    with oai.responses.stream(model="m", input=ASK, tools=tools) as stream:
        first = stream.get_final_response()
    call = first.output[0]
    assert call.type == "function_call"
    assert call.name == "shell"
    assert json.loads(call.arguments) == {"command": "echo AGENT-abc123"}
    assert first.usage is not None and first.usage.input_tokens > 0
    given: Any = [
        {"role": "user", "content": ASK},
        {"type": "function_call", "call_id": call.call_id, "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": call.call_id, "output": "AGENT-abc123"},
    ]
    with oai.responses.stream(model="m", input=given, tools=tools) as stream:
        final = stream.get_final_response()
    assert final.output_text == "The command printed AGENT-abc123."
    assert final.status == "completed"


def test_responses_not_streamed_and_the_local_shell_builtin(oai: openai.OpenAI) -> None:
    answer = oai.responses.create(model="m", input=ASK, tools=[{"type": "local_shell"}])
    call = answer.output[0]
    assert call.type == "local_shell_call"
    assert call.action.command == ["bash", "-lc", "echo AGENT-abc123"]
    plain = oai.responses.create(model="m", input="Say REPLY-zz")
    assert plain.output_text == "Hello from the agent upstream. REPLY-zz"


def test_messages_tool_use_streamed_with_input_json_deltas(
    claude: anthropic.Anthropic, upstream: AgentUpstream
) -> None:
    tools: Any = [{"name": "Bash", "input_schema": SCHEMA}]
    with claude.messages.stream(
        model="m", max_tokens=100, messages=[{"role": "user", "content": ASK}], tools=tools
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    block = first.content[0]
    assert block.type == "tool_use"
    assert block.input == {"command": "echo AGENT-abc123"}
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    messages: Any = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": [block.model_dump()]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": block.id, "content": "AGENT-abc123"}
            ],
        },
    ]
    final = claude.messages.create(model="m", max_tokens=100, messages=messages, tools=tools)
    assert final.content[0].type == "text"
    assert final.content[0].text == "The command printed AGENT-abc123."
    assert final.stop_reason == "end_turn"
    assert not upstream.requests[-1].streamed


def test_messages_text_stream_count_tokens_and_model_lists(
    claude: anthropic.Anthropic, oai: openai.OpenAI
) -> None:
    with claude.messages.stream(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "Say REPLY-q1"}]
    ) as stream:
        assert stream.get_final_text() == "Hello from the agent upstream. REPLY-q1"
    counted = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
    assert counted.input_tokens > 0
    assert [m.id for m in claude.models.list()] == ["agent-model"]
    assert [m.id for m in oai.models.list()] == ["agent-model"]


def test_gemini_function_call_and_streamed_text(upstream: AgentUpstream) -> None:
    url = f"{upstream.root_url}/v1beta/models/gemini-x"
    declaration = {"name": "run_shell_command", "parametersJsonSchema": SCHEMA}
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": ASK}]}],
        "tools": [{"functionDeclarations": [declaration]}],
    }
    with httpx.Client(headers={"x-goog-api-key": "k"}) as http:
        first = http.post(f"{url}:generateContent", json=body).json()
        candidate = first["candidates"][0]
        assert candidate["finishReason"] == "STOP"
        call = candidate["content"]["parts"][0]["functionCall"]
        assert call == {"name": "run_shell_command", "args": {"command": "echo AGENT-abc123"}}
        assert first["usageMetadata"]["promptTokenCount"] > 0
        result = {
            "functionResponse": {"name": call["name"], "response": {"output": "AGENT-abc123"}}
        }
        body["contents"] += [
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [result]},
        ]
        streamed = http.post(f"{url}:streamGenerateContent", params={"alt": "sse"}, json=body)
        assert streamed.headers["content-type"].startswith("text/event-stream")
        chunks = [
            orjson.loads(line[6:])
            for line in streamed.text.splitlines()
            if line.startswith("data: ")
        ]
        text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
        assert text == "The command printed AGENT-abc123."
        assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
        assert "usageMetadata" in chunks[-1]
        counted = http.post(f"{url}:countTokens", json=body).json()
        assert counted["totalTokens"] > 0
        listed = http.get(f"{upstream.root_url}/v1beta/models").json()
        assert listed["models"][0]["name"] == "models/agent-model"


def test_gemini_response_schema_gets_an_instance(upstream: AgentUpstream) -> None:
    schema = {
        "type": "OBJECT",
        "properties": {"next_speaker": {"type": "STRING", "enum": ["user"]}},
    }
    body = {
        "contents": [{"role": "user", "parts": [{"text": "who speaks next?"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseSchema": schema},
    }
    answer = httpx.post(f"{upstream.root_url}/v1beta/models/g:generateContent", json=body).json()
    text = answer["candidates"][0]["content"]["parts"][0]["text"]
    assert orjson.loads(text) == {"next_speaker": "user"}


def test_every_request_is_recorded_and_an_unknown_path_answers_json_404(
    upstream: AgentUpstream,
) -> None:
    answer = httpx.post(f"{upstream.root_url}/v1/nowhere", json={"a": 1}, headers={"x-k": "v"})
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "invalid_request_error"
    seen = upstream.requests[-1]
    assert (seen.method, seen.path, seen.body, seen.answer) == (
        "POST",
        "/v1/nowhere",
        {"a": 1},
        "status: 404",
    )
    assert seen.headers["x-k"] == "v"

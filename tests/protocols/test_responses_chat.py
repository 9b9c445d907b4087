import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response

from llmrelay.protocols.responses_chat import (
    chat_response_to_responses,
    responses_request_to_chat,
)
from llmrelay.protocols.translation import TranslationError

FIXTURES = Path(__file__).parent / "fixtures" / "responses"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def to_chat(**fields: Any) -> tuple[dict[str, Any], list[str]]:
    payload = {"model": "virtual", "input": "hi", **fields}
    return responses_request_to_chat(payload, upstream_model="upstream")


def chat_messages(*items: Any, **fields: Any) -> list[dict[str, Any]]:
    body, _ = to_chat(input=list(items), **fields)
    messages: list[dict[str, Any]] = body["messages"]
    return messages


def completion(
    message: dict[str, Any], finish_reason: str = "stop", **extra: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-xyz",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "upstream",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        **extra,
    }


def to_response(body: dict[str, Any], request: dict[str, Any] | None = None) -> dict[str, Any]:
    """Translates, and has the openai SDK check the result is a Response it accepts."""
    response = chat_response_to_responses(body, model="virtual", request=request or {})
    Response.model_validate(response)
    return response


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}


# --- golden fixtures (examples from the OpenAI docs)


@pytest.mark.parametrize(
    "name", ["request_function_calling.json", "request_structured_outputs.json"]
)
def test_request_golden(name: str) -> None:
    fixture = load(name)
    body, dropped = responses_request_to_chat(
        fixture["responses"], upstream_model=fixture["upstream_model"]
    )
    assert body == fixture["chat"]
    assert dropped == fixture["dropped"]


@pytest.mark.parametrize("name", ["response_text.json", "response_function_call.json"])
def test_response_golden(name: str) -> None:
    fixture = load(name)
    response = chat_response_to_responses(
        fixture["chat"], model=fixture["model"], request=fixture["request"]
    )
    assert isinstance(response.pop("completed_at"), int)
    assert response == fixture["response"]
    assert "output_text" not in response  # an SDK convenience, not part of the wire object
    response["completed_at"] = 0
    Response.model_validate(response)


def test_the_openai_client_reads_the_response() -> None:
    fixture = load("response_function_call.json")
    translated = chat_response_to_responses(
        fixture["chat"], model="virtual", request=fixture["request"]
    )
    seen: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json=translated)

    with httpx2.Client(transport=httpx2.MockTransport(handler)) as http:
        client = openai.OpenAI(api_key="k", base_url="http://relay/v1", http_client=http)
        response = client.responses.create(**fixture["request"])
    # What the SDK sent is what the translator is given.
    body, _ = responses_request_to_chat(seen[0], upstream_model="upstream")
    assert body["tools"][0]["function"]["name"] == "get_current_weather"
    call = response.output[0]
    assert call.type == "function_call"
    assert (call.call_id, call.name) == ("call_abc123", "get_current_weather")
    assert response.usage is not None
    assert response.usage.input_tokens == 82
    assert response.output_text == ""


# --- request: input items


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    body, dropped = to_chat(input="Hello", instructions="Be brief.")
    assert body == {
        "model": "upstream",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
        ],
    }
    assert dropped == []


def test_message_items_long_and_short_forms_and_roles() -> None:
    messages = chat_messages(
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "S"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Q"}]},
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "A", "annotations": []},
                {"type": "output_text", "text": "B", "annotations": []},
            ],
        },
    )
    assert messages == [
        {"role": "system", "content": "Rules."},
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "AB"},
    ]


def test_images_and_inline_files() -> None:
    messages = chat_messages(
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
                {
                    "type": "input_file",
                    "filename": "a.pdf",
                    "file_data": "data:application/pdf;base64,AA==",
                },
            ],
        }
    )
    assert messages[0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,AA==", "filename": "a.pdf"},
        },
    ]


def test_function_calls_follow_the_assistant_text_in_one_message() -> None:
    messages = chat_messages(
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": "Checking both."},
        {**CALL, "call_id": "call_1", "arguments": '{"city":"Paris"}'},
        {**CALL, "call_id": "call_2", "arguments": '{"city":"Rome"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "14C"},
        {"type": "function_call_output", "call_id": "call_2", "output": "20C"},
        {**CALL, "call_id": "call_3"},
    )
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assistant = messages[1]
    assert assistant["content"] == "Checking both."
    assert [(c["id"], c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        ("call_1", '{"city":"Paris"}'),
        ("call_2", '{"city":"Rome"}'),
    ]
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "14C"}
    # A call after the outputs opens a new assistant turn, without text.
    assert messages[4]["content"] is None
    assert messages[4]["tool_calls"][0]["id"] == "call_3"


def test_function_output_parts_and_dropped_reasoning() -> None:
    body, dropped = to_chat(
        input=[
            {"type": "reasoning", "id": "rs_1", "summary": []},
            CALL,
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [{"type": "input_text", "text": "sunny"}],
            },
        ]
    )
    assert body["messages"][1] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    assert dropped == ["input.reasoning"]


# --- request: fields


def test_sampling_stream_and_user() -> None:
    body, dropped = to_chat(
        max_output_tokens=256,
        temperature=0.5,
        top_p=0.9,
        stream=True,
        user="u-1",
        store=True,
        metadata={"k": "v"},
        service_tier="auto",
        prompt_cache_key="p",
        safety_identifier="s",
        truncation="disabled",
        background=False,
        include=["reasoning.encrypted_content"],
        stream_options={"include_obfuscation": False},
    )
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "model": "upstream",
        "max_tokens": 256,
        "temperature": 0.5,
        "top_p": 0.9,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "u-1",
    }
    assert set(dropped) == {
        "store",
        "metadata",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
        "truncation",
        "background",
        "include",
        "stream_options",
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tools_and_tool_choice(choice: Any, expected: Any) -> None:
    body, dropped = to_chat(
        tools=[{**WEATHER, "strict": False}], tool_choice=choice, parallel_tool_calls=True
    )
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather in a city",
                "parameters": WEATHER["parameters"],
                "strict": False,
            },
        }
    ]
    assert body["tool_choice"] == expected
    assert body["parallel_tool_calls"] is True
    assert dropped == []


def test_tool_switches_without_tools_are_dropped() -> None:
    body, dropped = to_chat(tools=[], tool_choice="auto", parallel_tool_calls=False)
    assert "tools" not in body and "tool_choice" not in body and "parallel_tool_calls" not in body
    assert dropped == ["tool_choice", "parallel_tool_calls"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ({"format": {"type": "text"}}, None),
        ({"format": {"type": "json_object"}}, {"type": "json_object"}),
        (
            {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        ),
    ],
)
def test_text_format(text: dict[str, Any], expected: Any) -> None:
    body, _ = to_chat(text=text)
    assert body.get("response_format") == expected


def test_reasoning_effort_and_verbosity() -> None:
    body, dropped = to_chat(
        reasoning={"effort": "high", "summary": None}, text={"verbosity": "low"}
    )
    assert body["reasoning_effort"] == "high"
    assert "response_format" not in body
    assert dropped == ["text.verbosity"]


# --- request: what raises TranslationError


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"conversation": {"id": "conv_1"}}, "conversation"),
        ({"background": True}, "background"),
        ({"prompt": {"id": "pmpt_1", "version": "2"}}, "prompt"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"truncation": "auto"}, "truncation"),
        ({"top_logprobs": 5}, "top_logprobs"),
        ({"context_management": [{"type": "compaction"}]}, "context_management"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools"),
        ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools"),
        ({"tools": [{"type": "mcp", "server_label": "x", "server_url": "https://x"}]}, "tools"),
        ({"tools": [{"type": "image_generation"}]}, "tools"),
        ({"tools": [{"type": "computer_use_preview"}]}, "tools"),
        ({"tools": [{"type": "custom", "name": "grammar"}]}, "tools"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "web_search"}}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "mode": "auto"}},
            "tool_choice",
        ),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text"),
        ({"text": {"format": {"type": "grammar"}}}, "text"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"instructions": ["not", "a", "string"]}, "instructions"),
        ({"reasoning": "high"}, "reasoning"),
        ({"input": []}, "input"),
        ({"input": 42}, "input"),
    ],
)
def test_refused_fields(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(TranslationError) as caught:
        to_chat(**fields)
    assert caught.value.param == param


@pytest.mark.parametrize(
    "item",
    [
        {"type": "item_reference", "id": "msg_1"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "computer_call_output", "call_id": "c", "output": {}},
        {"type": "mcp_call", "id": "m"},
        {"role": "tool", "content": "x"},
        {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]},
        {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]},
        {"role": "user", "content": [{"type": "input_file", "file_url": "https://x/a.pdf"}]},
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
        {"role": "system", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]},
        {"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x"}]},
        {"type": "function_call", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}},
        {"type": "function_call_output", "output": "x"},
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": [{"type": "input_image", "image_url": "https://x/y.png"}],
        },
        "just a string",
    ],
)
def test_refused_input_items(item: Any) -> None:
    with pytest.raises(TranslationError) as caught:
        to_chat(input=[{"role": "user", "content": "hi"}, item])
    assert caught.value.param == "input"


# --- response


def test_text_refusal_and_tool_calls_in_order() -> None:
    message = {
        "role": "assistant",
        "content": "Let me look.",
        "refusal": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": {"x": 1}}},
        ],
    }
    response = to_response(completion(message, "tool_calls"))
    assert [item["type"] for item in response["output"]] == [
        "message",
        "function_call",
        "function_call",
    ]
    assert [item["id"] for item in response["output"]] == ["msg_xyz", "fc_xyz_0", "fc_xyz_1"]
    assert response["output"][2]["arguments"] == '{"x":1}'
    assert response["status"] == "completed"
    refused = to_response(completion({"role": "assistant", "content": None, "refusal": "No."}))
    assert refused["output"][0]["content"] == [{"type": "refusal", "refusal": "No."}]


@pytest.mark.parametrize(
    ("finish_reason", "status", "details"),
    [
        ("stop", "completed", None),
        ("tool_calls", "completed", None),
        ("length", "incomplete", {"reason": "max_output_tokens"}),
        ("content_filter", "incomplete", {"reason": "content_filter"}),
    ],
)
def test_finish_reasons(finish_reason: str, status: str, details: Any) -> None:
    response = to_response(completion({"role": "assistant", "content": "Once upon"}, finish_reason))
    assert response["status"] == status
    assert response["incomplete_details"] == details
    assert response["output"][0]["status"] == ("completed" if details is None else "incomplete")
    assert (response["completed_at"] is None) == (details is not None)


def test_usage_and_echoed_request_settings() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 30,
        "total_tokens": 130,
        "prompt_tokens_details": {"cached_tokens": 60},
        "completion_tokens_details": {"reasoning_tokens": 12},
    }
    request = {
        "model": "virtual",
        "input": "hi",
        "instructions": "Be brief.",
        "max_output_tokens": 50,
        "temperature": 0.3,
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "metadata": {"k": "v"},
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_object"}},
        "user": "u-1",
        "store": True,
    }
    response = to_response(completion({"role": "assistant", "content": "{}"}, usage=usage), request)
    assert response["usage"] == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 130,
    }
    echoed = {key: response[key] for key in request if key not in ("input", "model")}
    assert echoed == {
        **{key: request[key] for key in echoed},
        "reasoning": {"effort": "low", "summary": None},
        "store": False,  # the gateway keeps nothing, whatever was asked
    }
    assert response["previous_response_id"] is None and response["error"] is None


def test_unknown_usage_stays_unknown() -> None:
    assert to_response(completion({"role": "assistant", "content": "x"}))["usage"] is None


# --- property: what a generated conversation keeps

texts = st.text(max_size=12)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=8)
arguments = st.dictionaries(ids, st.integers() | texts, max_size=3).map(json.dumps)


@st.composite
def input_items(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["message", "function_call", "function_call_output"]))
    if kind == "function_call":
        return {"type": kind, "call_id": draw(ids), "name": draw(ids), "arguments": draw(arguments)}
    if kind == "function_call_output":
        return {"type": kind, "call_id": draw(ids), "output": draw(texts)}
    role = draw(st.sampled_from(["user", "assistant", "system", "developer"]))
    part = "output_text" if role == "assistant" else "input_text"
    content = draw(
        texts | st.lists(texts.map(lambda t: {"type": part, "text": t}), min_size=1, max_size=3)
    )
    item: dict[str, Any] = {"role": role, "content": content}
    if draw(st.booleans()):
        item["type"] = "message"
    return item


def expected_trace(item: dict[str, Any]) -> tuple[Any, ...]:
    if item.get("type") == "function_call":
        return ("call", item["call_id"], item["name"], item["arguments"])
    if item.get("type") == "function_call_output":
        return ("tool", item["call_id"], item["output"])
    role = {"developer": "system"}.get(item["role"], item["role"])
    content = item["content"]
    text = content if isinstance(content, str) else "".join(part["text"] for part in content)
    return ("message", role, text)


def chat_trace(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    trace: list[tuple[Any, ...]] = []
    for message in messages:
        if message["role"] == "tool":
            trace.append(("tool", message["tool_call_id"], message["content"]))
            continue
        content = message["content"]
        if content is not None:
            text = content if isinstance(content, str) else "".join(p["text"] for p in content)
            trace.append(("message", message["role"], text))
        for call in message.get("tool_calls", []):
            function = call["function"]
            trace.append(("call", call["id"], function["name"], function["arguments"]))
    return trace


@st.composite
def function_tools(draw: st.DrawFn) -> dict[str, Any]:
    properties = draw(
        st.dictionaries(ids, st.sampled_from([{"type": "string"}, {"type": "integer"}]))
    )
    tool: dict[str, Any] = {"type": "function", "name": draw(ids)}
    tool["parameters"] = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        tool["description"] = draw(texts)
    return tool


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(input_items(), min_size=1, max_size=8),
    tools=st.lists(function_tools(), max_size=3),
)
def test_a_conversation_keeps_roles_texts_and_calls(
    items: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> None:
    body, _ = responses_request_to_chat(
        {"model": "virtual", "input": items, "tools": tools}, upstream_model="upstream"
    )
    messages = body["messages"]
    assert chat_trace(messages) == [expected_trace(item) for item in items]
    for index, message in enumerate(messages):
        if message.get("tool_calls"):
            # Calls only land on an assistant turn, and never on one a call could have joined.
            assert message["role"] == "assistant"
            assert (
                index == 0
                or messages[index - 1]["role"] != "assistant"
                or message["content"] is not None
            )
    assert [tool["function"] for tool in body.get("tools", [])] == [
        {key: tool[key] for key in ("name", "description", "parameters") if key in tool}
        for tool in tools
    ]

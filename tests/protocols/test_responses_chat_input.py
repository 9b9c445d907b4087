"""Responses input items, tools and tool_choice as Chat Completions messages and tools."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.protocols.responses_chat import responses_request_to_chat
from llmrelay.protocols.translation import TranslationError
from tests.protocols.responses_support import WEATHER, to_chat


def chat_messages(*items: Any, **fields: Any) -> list[dict[str, Any]]:
    body, _ = to_chat(input=list(items), **fields)
    messages: list[dict[str, Any]] = body["messages"]
    return messages


CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}


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


# --- request: tools


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


# --- request: what raises TranslationError


@pytest.mark.parametrize(
    "item",
    [
        {"type": "item_reference", "id": "msg_1"},
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

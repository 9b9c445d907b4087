"""Turn and tool translation (chat_anthropic_messages, anthropic_chat_messages), through the
public request translators."""

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.chat_anthropic import chat_request_to_anthropic
from llmrelay.protocols.translation import TranslationError


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "virtual", "messages": list(messages), **fields}


def to_anthropic(payload: dict[str, Any]) -> dict[str, Any]:
    body, _ = chat_request_to_anthropic(payload, upstream_model="claude")
    return body


def to_chat(payload: dict[str, Any]) -> dict[str, Any]:
    body, _ = anthropic_request_to_chat(payload, upstream_model="gpt")
    return body


USER = {"role": "user", "content": "hi"}


def messages_request(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 100, "messages": list(messages), **fields}


# --- Chat turns -> Anthropic


def test_system_and_developer_messages_become_the_system_prompt() -> None:
    body = to_anthropic(
        chat(
            {"role": "system", "content": "one"},
            USER,
            {"role": "developer", "content": [{"type": "text", "text": "two"}]},
        )
    )
    assert body["system"] == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert to_anthropic(chat({"role": "system", "content": "only"}, USER))["system"] == "only"
    assert "system" not in to_anthropic(chat(USER))


def test_consecutive_tool_messages_become_one_user_turn_with_results_first() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = to_anthropic(
        chat(
            USER,
            {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "c2"}]},
            {"role": "user", "content": "also this"},
            {"role": "tool", "tool_call_id": "c1", "content": "r1"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "r2"}]},
        )
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
        {"type": "tool_result", "tool_use_id": "c2", "content": [{"type": "text", "text": "r2"}]},
        {"type": "text", "text": "also this"},
    ]


def test_consecutive_same_role_messages_are_merged() -> None:
    body = to_anthropic(
        chat(
            {"role": "user", "content": "a"},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
            {"role": "assistant", "content": ""},
            {"role": "assistant", "content": "d"},
        )
    )
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}],
        },
    ]


def test_images() -> None:
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]
    body = to_anthropic(chat({"role": "user", "content": content}))
    assert body["messages"][0]["content"][1:] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


@pytest.mark.parametrize(
    "url", ["data:image/bmp;base64,Qk0=", "data:image/png,rawbytes", "ftp://example.com/a.png"]
)
def test_unsupported_images_are_refused(url: str) -> None:
    part = {"type": "image_url", "image_url": {"url": url}}
    with pytest.raises(TranslationError) as caught:
        to_anthropic(chat({"role": "user", "content": [part]}))
    assert caught.value.param == "messages"


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", "42"])
def test_tool_call_arguments_must_be_a_json_object(arguments: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    with pytest.raises(TranslationError) as caught:
        to_anthropic(chat(USER, {"role": "assistant", "tool_calls": [call]}))
    assert caught.value.param == "messages"


def test_empty_arguments_are_an_empty_input() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
    body = to_anthropic(chat(USER, {"role": "assistant", "tool_calls": [call]}))
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    ]


def test_a_conversation_without_content_is_refused() -> None:
    with pytest.raises(TranslationError) as caught:
        to_anthropic(chat({"role": "system", "content": "s"}, {"role": "user", "content": ""}))
    assert caught.value.param == "messages"


@pytest.mark.parametrize(
    "part", [{"type": "input_audio", "input_audio": {}}, {"type": "file", "file": {}}]
)
def test_unsupported_parts_are_refused(part: dict[str, Any]) -> None:
    with pytest.raises(TranslationError) as caught:
        to_anthropic(chat({"role": "user", "content": [part]}))
    assert caught.value.param == "messages"


# --- Anthropic turns -> Chat


def test_tool_results_become_tool_messages_before_the_rest_of_the_turn() -> None:
    turn = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "a"}],
            },
            {"type": "tool_result", "tool_use_id": "t2"},
            {"type": "text", "text": "next?"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/gif", "data": "R0"},
            },
        ],
    }
    assert to_chat(messages_request(turn))["messages"] == [
        {"role": "tool", "tool_call_id": "t1", "content": "a"},
        {"role": "tool", "tool_call_id": "t2", "content": ""},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "next?"},
                {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0"}},
            ],
        },
    ]


def test_thinking_blocks_of_earlier_turns_are_dropped() -> None:
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "answer"},
        ],
    }
    body, dropped = anthropic_request_to_chat(
        messages_request(USER, assistant, USER), upstream_model="gpt"
    )
    assert body["messages"][1] == {"role": "assistant", "content": "answer"}
    assert dropped == ["messages.content.thinking"]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [{"type": "search_result", "source": "https://x", "content": []}],
        },
    ],
)
def test_unsupported_blocks_are_refused(block: dict[str, Any]) -> None:
    with pytest.raises(TranslationError) as caught:
        to_chat(messages_request({"role": "user", "content": [block]}))
    assert caught.value.param == "messages"


# --- property: Chat -> Anthropic -> Chat keeps what both can say

texts = st.text(max_size=12)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
text_content = texts | st.lists(texts.map(lambda t: {"type": "text", "text": t}), max_size=3)


@st.composite
def tool_calls(draw: st.DrawFn) -> dict[str, Any]:
    arguments = draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3))
    return {
        "id": draw(ids),
        "type": "function",
        "function": {"name": draw(ids), "arguments": json.dumps(arguments)},
    }


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    if role == "assistant":
        message: dict[str, Any] = {"role": role, "content": draw(st.none() | texts)}
        calls = draw(st.lists(tool_calls(), max_size=3))
        if calls:
            message["tool_calls"] = calls
        return message
    if role == "tool":
        return {"role": role, "tool_call_id": draw(ids), "content": draw(text_content)}
    return {"role": role, "content": draw(text_content)}


@st.composite
def functions(draw: st.DrawFn) -> dict[str, Any]:
    function: dict[str, Any] = {"name": draw(ids)}
    description = draw(st.none() | texts)
    if description is not None:
        function["description"] = description
    properties = draw(st.dictionaries(ids, st.sampled_from(["string", "integer"]), max_size=3))
    if properties:
        function["parameters"] = {
            "type": "object",
            "properties": {name: {"type": kind} for name, kind in properties.items()},
        }
    return {"type": "function", "function": function}


@st.composite
def chat_requests(draw: st.DrawFn) -> dict[str, Any]:
    first = {"role": "user", "content": draw(st.text(min_size=1, max_size=12))}
    request = chat(first, *draw(st.lists(messages(), max_size=8)))
    tools = draw(st.lists(functions(), max_size=3))
    if tools:
        request["tools"] = tools
    return request


def pieces(content: Any) -> list[str]:
    """The non-empty texts of a message (empty text has no Anthropic form)."""
    if isinstance(content, str):
        return [content] if content else []
    return [part["text"] for part in content or [] if part["text"]]


Item = tuple[Any, ...]


def preserved(messages: list[dict[str, Any]]) -> tuple[list[str], list[tuple[str, list[Item]]]]:
    """What survives a round trip: all system and developer text, in order, as one system
    prompt; each run of same-side messages (user and tool are one side) as one turn, its
    texts, tool calls (id, name, parsed arguments) and tool results in order, except that
    a user turn's tool results come before its texts (Anthropic requires it) and an assistant
    turn's texts before its tool calls (a Chat message holds its text ahead of its calls)."""
    system: list[str] = []
    turns: list[tuple[str, list[Item]]] = []
    for message in messages:
        role, content = message["role"], message.get("content")
        if role in ("system", "developer"):
            system += pieces(content)
            continue
        items: list[Item]
        if role == "tool":
            items = [("result", message["tool_call_id"], pieces(content))]
        else:
            items = [("text", text) for text in pieces(content)]
            for call in message.get("tool_calls") or []:
                function = call["function"]
                arguments = json.loads(function["arguments"])
                items.append(("call", call["id"], function["name"], arguments))
        side = "assistant" if role == "assistant" else "user"
        if not items:
            continue
        if turns and turns[-1][0] == side:
            turns[-1][1].extend(items)
        else:
            turns.append((side, items))
    for side, items in turns:
        first = "result" if side == "user" else "text"
        items.sort(key=lambda item: item[0] != first)
    return system, turns


def preserved_tools(tools: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    empty = {"type": "object", "properties": {}}
    return [
        (
            tool["function"]["name"],
            tool["function"].get("description") or None,
            tool["function"].get("parameters") or empty,
        )
        for tool in tools
    ]


def assert_valid_anthropic(body: dict[str, Any]) -> None:
    roles = [message["role"] for message in body["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            assert content
            continue
        kinds = [block["type"] for block in content]
        assert kinds == sorted(kinds, key=lambda kind: kind != "tool_result"), kinds
        assert all(block["text"] for block in content if block["type"] == "text")


@settings(deadline=None)
@given(chat_requests())
def test_round_trip_keeps_what_both_protocols_can_say(request: dict[str, Any]) -> None:
    middle, _ = chat_request_to_anthropic(request, upstream_model="claude")
    assert_valid_anthropic(middle)
    back, dropped = anthropic_request_to_chat(middle, upstream_model="gpt")
    assert dropped == []
    assert preserved(back["messages"]) == preserved(request["messages"])
    assert preserved_tools(back.get("tools", [])) == preserved_tools(request.get("tools", []))

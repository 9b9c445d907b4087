"""Anthropic Messages requests as chat, on what Claude Code really sends
(tests/agents/captured/claude-code-*.json) and on each newer part of the Messages API."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.translation import TranslationError

CAPTURED = Path(__file__).parent.parent / "agents" / "captured"
USER = {"role": "user", "content": "hi"}


def captured(task: str, exchange: int) -> dict[str, Any]:
    data = json.loads((CAPTURED / f"claude-code-{task}.json").read_text())
    body: dict[str, Any] = data["exchanges"][exchange]["body"]
    return body


def request(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "messages": list(messages) or [USER], **fields}


def to_chat(payload: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    return anthropic_request_to_chat(payload, upstream_model="gpt")


# --- what Claude Code sends


def test_claude_codes_first_request_translates_and_names_what_it_drops() -> None:
    payload = captured("tool", 0)
    assert payload["output_config"] == {"effort": "high"}  # the fixture is what we think it is
    assert payload["thinking"] == {"type": "adaptive", "display": "omitted"}
    body, dropped = to_chat(copy.deepcopy(payload))
    assert body["reasoning_effort"] == "high"
    assert "output_config" not in body and "thinking" not in body
    assert dropped == ["context_management", "cache_control", "tools.defer_loading"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 32000
    assert body["user"] == payload["metadata"]["user_id"]
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == [t["name"] for t in payload["tools"]]  # deferred ones declared too
    assert all(t["type"] == "function" for t in body["tools"])


def test_claude_codes_late_system_message_joins_the_system_prompt_in_order() -> None:
    payload = captured("tool", 0)
    late = payload["messages"][1]
    assert late["role"] == "system"  # after the first user turn, as Claude Code places it
    body, _ = to_chat(copy.deepcopy(payload))
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user"]
    system = body["messages"][0]["content"]
    texts = [part["text"] for part in system]
    assert texts[:3] == [block["text"] for block in payload["system"]]
    assert texts[3] == late["content"][0]["text"]


def test_claude_codes_tool_loop_turns_translate() -> None:
    payload = captured("tool", 1)
    body, _ = to_chat(copy.deepcopy(payload))
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    call = body["messages"][2]["tool_calls"][0]
    use = payload["messages"][2]["content"][0]
    assert call["id"] == use["id"] and call["function"]["name"] == "Bash"
    assert json.loads(call["function"]["arguments"]) == use["input"]
    assert body["messages"][3]["tool_call_id"] == use["id"]
    # The late system message here is a string: it joins all the same.
    assert body["messages"][0]["content"][-1]["text"] == payload["messages"][1]["content"]


# --- effort and thinking


@pytest.mark.parametrize(
    ("effort", "expected"),
    [("low", "low"), ("medium", "medium"), ("high", "high"), ("xhigh", "xhigh"), ("max", "xhigh")],
)
def test_output_config_effort_is_reasoning_effort(effort: str, expected: str) -> None:
    body, dropped = to_chat(request(output_config={"effort": effort}))
    assert body["reasoning_effort"] == expected
    assert dropped == []


@pytest.mark.parametrize(
    ("budget", "expected"), [(1024, "low"), (4000, "medium"), (8192, "medium"), (20000, "high")]
)
def test_a_thinking_budget_is_the_nearest_effort(budget: int, expected: str) -> None:
    body, _ = to_chat(request(thinking={"type": "enabled", "budget_tokens": budget}))
    assert body["reasoning_effort"] == expected


def test_the_effort_wins_over_the_budget_and_adaptive_alone_is_the_providers_default() -> None:
    thinking = {"type": "enabled", "budget_tokens": 20000}
    body, _ = to_chat(request(thinking=thinking, output_config={"effort": "low"}))
    assert body["reasoning_effort"] == "low"
    body, _ = to_chat(request(thinking={"type": "adaptive"}))
    assert "reasoning_effort" not in body
    body, _ = to_chat(request(thinking={"type": "disabled"}))
    assert "reasoning_effort" not in body


# --- structured output


def test_output_config_format_is_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "schema": schema}
    for fields in ({"output_config": {"format": fmt}}, {"output_format": fmt}):
        body, dropped = to_chat(request(**fields))
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema},
        }
        assert dropped == []


def test_a_task_budget_is_dropped_by_name() -> None:
    budget = {"type": "tokens", "total": 400000}
    body, dropped = to_chat(request(output_config={"effort": "high", "task_budget": budget}))
    assert body["reasoning_effort"] == "high"
    assert dropped == ["output_config.task_budget"]


# --- tools


def test_server_tools_are_left_out_and_named() -> None:
    tools = [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "web_fetch_20250910", "name": "web_fetch"},
        {"name": "Bash", "input_schema": {"type": "object"}, "strict": True},
    ]
    body, dropped = to_chat(request(tools=tools, tool_choice={"type": "auto"}))
    assert [t["function"]["name"] for t in body["tools"]] == ["Bash"]
    assert body["tool_choice"] == "auto"
    assert dropped == ["web_search", "web_fetch", "tools.strict"]


def test_only_server_tools_leave_no_tools_and_no_choice() -> None:
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    body, dropped = to_chat(request(tools=tools, tool_choice={"type": "auto"}))
    assert "tools" not in body and "tool_choice" not in body
    assert dropped == ["web_search", "tool_choice"]


def test_images_a_tool_returned_follow_its_result_as_a_user_message() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    use = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.png"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "the image:"}, image],
    }
    body, _ = to_chat(
        request(
            USER, {"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}
        )
    )
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "the image:"}
    assert body["messages"][3] == {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}],
    }


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format"),
        ({"output_format": {"type": "text"}}, "output_format"),
        ({"thinking": {"type": "enabled"}}, "thinking"),
        ({"thinking": "on"}, "thinking"),
        ({"output_config": "high"}, "output_config"),
    ],
)
def test_what_cannot_be_said_is_refused_naming_the_field(
    fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(TranslationError) as caught:
        to_chat(request(**fields))
    assert caught.value.param == param


def test_a_tool_choice_naming_a_server_tool_left_out_goes_with_it() -> None:
    tools = [
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "Bash", "input_schema": {"type": "object"}},
    ]
    choice = {"type": "tool", "name": "web_search"}
    body, dropped = to_chat(request(tools=tools, tool_choice=choice))
    assert "tool_choice" not in body and len(body["tools"]) == 1
    assert dropped == ["web_search", "tool_choice"]

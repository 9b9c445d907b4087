"""Responses tools through chat (protocols/responses_tools.py), on what Codex really sends
(tests/agents/captured/codex-*.json): namespaces flattened and named back, custom, local
shell and apply patch tools as functions and their calls as the client's own items, OpenAI's
built-in tools left out and named."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llmrelay.protocols.responses_chat import chat_response_to_responses, responses_request_to_chat
from llmrelay.protocols.responses_tools import NAMESPACE_SEPARATOR
from llmrelay.protocols.translation import TranslationError
from tests.protocols.responses_support import WEATHER, to_chat
from tests.protocols.test_responses_chat_stream import (
    call_delta,
    chunk,
    judged,
    run,
    usage_chunk,
)

CAPTURED = Path(__file__).parents[1] / "agents" / "captured"


def codex_request(task: str, number: int = 0) -> dict[str, Any]:
    exchanges = json.loads((CAPTURED / f"codex-{task}.json").read_text())["exchanges"]
    body: dict[str, Any] = exchanges[number]["body"]
    return body


def completion(calls: list[tuple[str, str, str]], text: str | None = None) -> dict[str, Any]:
    tool_calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        for call_id, name, arguments in calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-t1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "upstream",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }


CUSTOM = {
    "type": "custom",
    "name": "apply_diff",
    "description": "Apply a diff.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
        {"type": "custom", "name": "note"},
    ],
}


# --- Codex's own request


def test_codex_request_translates_with_its_namespace_flattened_and_web_search_left_out() -> None:
    payload = codex_request("tool")
    namespace = next(t for t in payload["tools"] if t["type"] == "namespace")
    body, dropped = responses_request_to_chat(copy.deepcopy(payload), upstream_model="m")
    names = [tool["function"]["name"] for tool in body["tools"]]
    assert "exec_command" in names
    inner = [f"{namespace['name']}{NAMESPACE_SEPARATOR}{t['name']}" for t in namespace["tools"]]
    assert inner and set(inner) <= set(names)
    flattened = next(t for t in body["tools"] if t["function"]["name"] == inner[0])
    assert flattened["function"]["description"].startswith(f"[{namespace['name']}] ")
    assert flattened["function"]["parameters"] == namespace["tools"][0]["parameters"]
    assert len(names) == len(payload["tools"]) - 2 + len(namespace["tools"])  # web_search out
    assert "tools.web_search" in dropped
    assert "client_metadata" in dropped and "prompt_cache_key" not in dropped
    assert body["prompt_cache_key"] == payload["prompt_cache_key"]  # chat has it too
    # store: false is honoured, include and reasoning.summary are carried: not dropped.
    assert not {"store", "include", "reasoning.summary"} & set(dropped)
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True


def test_codex_second_turn_carries_its_call_and_the_commands_output() -> None:
    payload = codex_request("tool", 1)
    body, _ = responses_request_to_chat(copy.deepcopy(payload), upstream_model="m")
    call_message, output = body["messages"][-2:]
    assert call_message["role"] == "assistant"
    assert call_message["tool_calls"][0]["function"]["name"] == "exec_command"
    assert output["role"] == "tool"
    assert output["tool_call_id"] == call_message["tool_calls"][0]["id"]
    assert "AGENT-captured" in output["content"]


def test_a_namespaced_call_goes_back_to_codex_by_its_name_and_namespace() -> None:
    payload = codex_request("tool")
    namespace = next(t for t in payload["tools"] if t["type"] == "namespace")
    member = namespace["tools"][0]["name"]
    flat = f"{namespace['name']}{NAMESPACE_SEPARATOR}{member}"
    answer = completion([("call_9", flat, '{"target": "a1"}')])
    response = chat_response_to_responses(answer, model="virtual", request=payload)
    (item,) = response["output"]
    assert item["type"] == "function_call"
    assert (item["name"], item["namespace"], item["call_id"]) == (
        member,
        namespace["name"],
        "call_9",
    )
    # Codex sends the call back in its history: it reaches the model under the flat name.
    follow_up = {
        **payload,
        "input": [
            *payload["input"],
            item,
            {
                "type": "function_call_output",
                "call_id": "call_9",
                "output": "closed",
            },
        ],
    }
    body, _ = responses_request_to_chat(follow_up, upstream_model="m")
    assert body["messages"][-2]["tool_calls"][0]["function"]["name"] == flat
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": "call_9", "content": "closed"}


def test_a_namespaced_call_streams_as_a_function_call_with_its_namespace() -> None:
    request = {"tools": [NAMESPACE]}
    events = run(
        [
            chunk({"role": "assistant"}),
            chunk(call_delta(0, '{"id":', id="call_1", name="crm__lookup")),
            chunk(call_delta(0, ' "7"}')),
            chunk({}, "tool_calls"),
            usage_chunk(),
        ],
        request,
    )
    response = judged(events)
    (item,) = response.output
    assert item.type == "function_call"
    assert (item.name, item.namespace, item.arguments) == ("lookup", "crm", '{"id": "7"}')


# --- custom (freeform) tools


def test_a_custom_tool_is_a_function_of_one_string_and_its_grammar_is_told_not_enforced() -> None:
    body, dropped = to_chat(tools=[CUSTOM, WEATHER], tool_choice={"type": "custom", "name": "x"})
    function = body["tools"][0]["function"]
    assert function["name"] == "apply_diff"
    assert function["parameters"]["required"] == ["input"]
    assert "start: /.+/" in function["description"] and "lark" in function["description"]
    assert dropped == ["tools.format"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "x"}}


def test_a_custom_call_comes_back_as_custom_tool_call_and_returns_as_its_input() -> None:
    request = {"model": "virtual", "input": "hi", "tools": [CUSTOM, NAMESPACE]}
    answer = completion(
        [
            ("call_1", "apply_diff", '{"input": "*** Begin Patch"}'),
            ("call_2", "crm__note", "not json at all"),
        ]
    )
    response = chat_response_to_responses(answer, model="virtual", request=request)
    first, second = response["output"]
    assert first["type"] == "custom_tool_call"
    assert (first["name"], first["input"], first["call_id"]) == (
        "apply_diff",
        "*** Begin Patch",
        "call_1",
    )
    assert "namespace" not in first
    assert (second["type"], second["name"], second["namespace"]) == (
        "custom_tool_call",
        "note",
        "crm",
    )
    assert second["input"] == "not json at all"  # what the model wrote, as it is
    history = [
        *response["output"],
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "applied"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "noted"},
    ]
    body, _ = responses_request_to_chat({**request, "input": history}, upstream_model="m")
    calls = body["messages"][0]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["apply_diff", "crm__note"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"input": "*** Begin Patch"}
    assert body["messages"][1] == {"role": "tool", "tool_call_id": "call_1", "content": "applied"}


def test_a_custom_call_streams_whole_with_its_input_events() -> None:
    events = run(
        [
            chunk({"role": "assistant", "content": "Patching."}),
            chunk(call_delta(0, '{"input": "a', id="call_1", name="apply_diff")),
            chunk(call_delta(0, 'b"}')),
            chunk({}, "tool_calls"),
            usage_chunk(),
        ],
        {"tools": [CUSTOM]},
    )
    kinds = [kind for kind, _ in events]
    assert "response.function_call_arguments.delta" not in kinds
    start = kinds.index("response.custom_tool_call_input.delta")
    assert kinds[start - 1 : start + 3] == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
    ]
    response = judged(events)
    message, call = response.output
    assert message.type == "message"
    assert call.type == "custom_tool_call"
    assert (call.name, call.input, call.call_id) == ("apply_diff", "ab", "call_1")


# --- local_shell and apply_patch


def test_local_shell_and_apply_patch_round_trip() -> None:
    request = {
        "model": "virtual",
        "input": "hi",
        "tools": [{"type": "local_shell"}, {"type": "apply_patch"}],
    }
    body, dropped = responses_request_to_chat(copy.deepcopy(request), upstream_model="m")
    assert [t["function"]["name"] for t in body["tools"]] == ["local_shell", "apply_patch"]
    assert dropped == []
    operation = {"type": "update_file", "path": "a.py", "diff": "@@\n-x\n+y"}
    answer = completion(
        [
            ("call_s", "local_shell", '{"command": ["echo", "hi"], "timeout_ms": 1000}'),
            ("call_p", "apply_patch", json.dumps(operation)),
        ]
    )
    response = chat_response_to_responses(answer, model="virtual", request=request)
    shell, patch = response["output"]
    assert shell["type"] == "local_shell_call" and shell["call_id"] == "call_s"
    assert shell["action"] == {
        "type": "exec",
        "command": ["echo", "hi"],
        "env": {},
        "timeout_ms": 1000,
        "user": None,
        "working_directory": None,
    }
    assert patch["type"] == "apply_patch_call" and patch["operation"] == operation
    history = [
        shell,
        {"type": "local_shell_call_output", "id": "call_s", "output": '{"output": "hi"}'},
        patch,
        {"type": "apply_patch_call_output", "call_id": "call_p", "status": "completed"},
    ]
    body, _ = responses_request_to_chat({**request, "input": history}, upstream_model="m")
    shell_call, shell_out, patch_call, patch_out = body["messages"]
    assert json.loads(shell_call["tool_calls"][0]["function"]["arguments"]) == {
        "command": ["echo", "hi"],
        "env": {},
        "timeout_ms": 1000,
    }
    assert shell_out == {"role": "tool", "tool_call_id": "call_s", "content": '{"output": "hi"}'}
    assert json.loads(patch_call["tool_calls"][0]["function"]["arguments"]) == operation
    assert patch_out == {"role": "tool", "tool_call_id": "call_p", "content": "[completed]"}


# --- built-in tools


def test_built_in_tools_are_left_out_and_named() -> None:
    body, dropped = to_chat(
        tools=[
            {"type": "web_search", "external_web_access": True},
            {"type": "file_search", "vector_store_ids": ["vs_1"]},
            {"type": "mcp", "server_label": "x", "server_url": "https://x"},
            WEATHER,
        ]
    )
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
    assert dropped == ["tools.web_search", "tools.file_search", "tools.mcp"]
    only_builtin, dropped = to_chat(tools=[{"type": "web_search"}], tool_choice="auto")
    assert "tools" not in only_builtin and "tool_choice" not in only_builtin
    assert dropped == ["tools.web_search", "tool_choice"]


def test_a_web_search_call_of_an_earlier_turn_is_left_out() -> None:
    body, dropped = to_chat(
        input=[
            {"role": "user", "content": "news?"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"role": "assistant", "content": "Nothing new."},
        ]
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert dropped == ["input.web_search_call"]


@pytest.mark.parametrize(
    "tools",
    [
        [CUSTOM, {**CUSTOM, "description": "again"}],
        [{"type": "function", "name": "crm__lookup"}, NAMESPACE],
    ],
)
def test_two_tools_of_one_name_are_refused(tools: list[dict[str, Any]]) -> None:
    with pytest.raises(TranslationError) as caught:
        to_chat(tools=tools)
    assert caught.value.param == "tools"
    assert "two tools" in caught.value.message


def test_a_tool_choice_naming_a_built_in_tool_is_refused() -> None:
    with pytest.raises(TranslationError) as caught:
        to_chat(tools=[WEATHER, {"type": "web_search"}], tool_choice={"type": "web_search"})
    assert caught.value.param == "tool_choice"

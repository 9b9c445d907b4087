"""The scripted agent's decisions (tests/support/agent_script.py), protocol-free."""

from __future__ import annotations

from typing import Any

import orjson

from tests.support.agent_script import (
    Conversation,
    Reply,
    Tool,
    ToolCall,
    Turn,
    decide,
    schema_instance,
    shell_arguments,
)

BASH = Tool(
    "Bash",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "description": {"type": "string"},
            "timeout": {"type": "number"},
        },
        "required": ["command", "description"],
    },
)
ASK = Turn("user", "Run the shell command `echo AGENT-abc123` and tell me what it printed.")


def test_a_command_asked_for_calls_the_shell_tool_with_arguments_from_its_schema() -> None:
    decision = decide(Conversation((Turn("system", "be brief"), ASK), (Tool("Read"), BASH)))
    assert isinstance(decision, ToolCall)
    assert decision.tool is BASH
    assert decision.arguments == {"command": "echo AGENT-abc123", "description": "Print the token"}
    assert decision.command == "echo AGENT-abc123"
    assert decision.call_id.startswith("call_")


def test_a_command_writing_a_file_keeps_its_tee_and_its_token() -> None:
    """`| tee FILE` after the echo (tests/agents/test_codex_subscription.py): the command
    called is the whole of it, so the file on disk shows the tool ran; the token is the
    echo's."""
    ask = Turn("user", "Run the shell command `echo AGENT-abc123 | tee ran.txt` and say.")
    decision = decide(Conversation((ask,), (BASH,)))
    assert isinstance(decision, ToolCall)
    assert decision.command == "echo AGENT-abc123 | tee ran.txt"
    turns = (ask, Turn("tool_call", "Bash ..."), Turn("tool_result", "AGENT-abc123\n"))
    assert decide(Conversation(turns, (BASH,))) == Reply("The command printed AGENT-abc123.")


def test_the_tool_result_with_the_token_gets_the_final_answer() -> None:
    turns = (ASK, Turn("tool_call", "Bash ..."), Turn("tool_result", "AGENT-abc123\n"))
    assert decide(Conversation(turns, (BASH,))) == Reply("The command printed AGENT-abc123.")


def test_a_tool_result_without_the_token_ends_the_loop_instead_of_calling_again() -> None:
    turns = (ASK, Turn("tool_call", "Bash ..."), Turn("tool_result", "permission denied"))
    decision = decide(Conversation(turns, (BASH,)))
    assert decision == Reply("The command did not print AGENT-abc123: permission denied")


def test_an_older_result_does_not_answer_a_newer_request() -> None:
    again = Turn("user", "Now run `echo AGENT-def456`.")
    turns = (ASK, Turn("tool_result", "AGENT-abc123"), Turn("assistant", "done"), again)
    decision = decide(Conversation(turns, (BASH,)))
    assert isinstance(decision, ToolCall)
    assert decision.command == "echo AGENT-def456"


def test_a_recall_turn_is_answered_from_the_tool_result_in_the_history() -> None:
    recall = Turn("user", "What did the command you ran earlier print? Answer ...")
    first = (ASK, Turn("tool_call", "Bash ..."), Turn("tool_result", "AGENT-abc123\n"))
    turns = (*first, Turn("assistant", "The command printed AGENT-abc123."), recall)
    assert decide(Conversation(turns, (BASH,))) == Reply("Recalled AGENT-abc123.")
    # Without the first turn's history there is nothing to recall (and no tool is called).
    decision = decide(Conversation((recall,), (BASH,)))
    assert decision == Reply("Nothing was run earlier in this conversation.")


def test_without_a_shell_tool_the_answer_is_plain() -> None:
    assert decide(Conversation((ASK,), (Tool("Read"),))) == Reply("Hello.")
    plain = Turn("user", "Answer with the word REPLY-x9 and nothing else.")
    assert decide(Conversation((plain,))) == Reply("Hello from the agent upstream. REPLY-x9")


def test_each_clients_shell_tool_gets_the_command_in_its_own_shape() -> None:
    argv = Tool("shell", {"properties": {"command": {"type": "array"}}, "required": ["command"]})
    assert shell_arguments(argv, "echo hi") == {"command": ["bash", "-lc", "echo hi"]}
    unified = Tool(
        "exec_command",
        {"properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}}},
    )
    assert shell_arguments(unified, "echo hi") == {"cmd": "echo hi"}
    builtin = Tool("local_shell", {}, "local_shell")
    assert shell_arguments(builtin, "echo hi") == {"command": ["bash", "-lc", "echo hi"]}
    freeform = Tool("shell", {}, "custom")
    assert shell_arguments(freeform, "echo hi") == {"input": "echo hi"}


def test_a_demanded_json_schema_gets_a_minimal_valid_instance() -> None:
    # Gemini CLI's next-speaker check, in Gemini's upper-case OpenAPI subset
    next_speaker: dict[str, Any] = {
        "type": "OBJECT",
        "properties": {
            "reasoning": {"type": "STRING"},
            "next_speaker": {"type": "STRING", "enum": ["user", "model"]},
        },
        "required": ["reasoning", "next_speaker"],
    }
    decision = decide(Conversation((ASK,), (BASH,), next_speaker))
    assert isinstance(decision, Reply)
    assert orjson.loads(decision.text) == {"reasoning": "ok", "next_speaker": "user"}


def test_schema_instances_follow_refs_branches_and_types() -> None:
    schema = {
        "$defs": {"Title": {"type": "object", "properties": {"title": {"type": "string"}}}},
        "type": "object",
        "properties": {
            "title": {"$ref": "#/$defs/Title"},
            "count": {"type": "integer", "minimum": 2},
            "ok": {"type": ["boolean", "null"]},
            "either": {"anyOf": [{"type": "number"}, {"type": "string"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "kind": {"const": "x"},
        },
    }
    assert schema_instance(schema) == {
        "title": {"title": "ok"},
        "count": 2,
        "ok": False,
        "either": 0,
        "tags": ["ok"],
        "kind": "x",
    }

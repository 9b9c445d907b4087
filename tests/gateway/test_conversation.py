"""The conversation a request belongs to: its session header, its prompt_cache_key, else the
calling key and a digest of its first turn (never the growing history)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llmrelay.gateway.conversation import (
    SESSION_HEADERS,
    conversation_of,
    prefix_digest,
    response_session,
)
from llmrelay.gateway.ingress import begin

SYSTEM = "You are a coding agent."
CAPTURED = Path(__file__).resolve().parents[1] / "agents" / "captured"
TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def _messages_turns() -> tuple[dict[str, Any], dict[str, Any]]:
    """An Anthropic conversation's first and second turn, as Claude Code sends them: the
    cache mark moves from the first user message to the newest one."""
    first: dict[str, Any] = {
        "model": "m",
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": TOOLS,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "list files", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ],
    }
    second = copy.deepcopy(first)
    del second["messages"][0]["content"][0]["cache_control"]
    second["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": "a b c"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}],
        },
    ]
    return first, second


def test_every_turn_of_a_conversation_has_the_first_turns_digest() -> None:
    first, second = _messages_turns()
    assert prefix_digest("messages", first) == prefix_digest("messages", second)
    other = copy.deepcopy(first)
    other["messages"][0]["content"][0]["text"] = "run the tests"
    assert prefix_digest("messages", other) != prefix_digest("messages", first)
    tooled = copy.deepcopy(first)
    tooled["tools"] = [*TOOLS, {"name": "Read", "input_schema": {"type": "object"}}]
    assert prefix_digest("messages", tooled) != prefix_digest("messages", first)
    prompted = copy.deepcopy(second)
    prompted["system"][0]["text"] = "You are terse."
    assert prefix_digest("messages", prompted) != prefix_digest("messages", second)


def test_chat_responses_and_gemini_digests_read_only_the_first_turn() -> None:
    chat: dict[str, Any] = {
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
    }
    later = copy.deepcopy(chat)
    later["messages"] += [
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "more"},
    ]
    assert prefix_digest("chat", chat) == prefix_digest("chat", later)
    changed = copy.deepcopy(later)
    changed["messages"][0]["content"] = "You are terse."
    assert prefix_digest("chat", changed) != prefix_digest("chat", later)

    responses: dict[str, Any] = {
        "instructions": SYSTEM,
        "input": [{"role": "user", "content": "hi"}],
    }
    continued = copy.deepcopy(responses)
    continued["input"] += [{"type": "function_call_output", "call_id": "c", "output": "x"}]
    assert prefix_digest("responses", responses) == prefix_digest("responses", continued)
    assert prefix_digest("responses", {**responses, "input": "hi"}) != prefix_digest(
        "responses", {**responses, "input": "ho"}
    )

    gemini = {"systemInstruction": {"parts": [{"text": SYSTEM}]}, "contents": [{"parts": []}]}
    grown = {**gemini, "contents": [{"parts": []}, {"role": "model", "parts": []}]}
    assert prefix_digest("gemini_stream", gemini) == prefix_digest("gemini_generate", grown)


def test_a_session_header_then_prompt_cache_key_then_the_key_and_digest() -> None:
    first, second = _messages_turns()
    assert conversation_of("messages", first, "abc", "key1") == "s:abc"
    cached = {**first, "prompt_cache_key": "pck-1"}
    assert conversation_of("responses", cached, None, "key1") == "c:pck-1"
    assert conversation_of("messages", cached, "abc", "key1") == "s:abc"
    by_key = conversation_of("messages", first, None, "key1")
    assert by_key == conversation_of("messages", second, None, "key1")
    assert by_key is not None and by_key.startswith("p:key1:") and len(by_key) < 60
    assert conversation_of("messages", first, None, "key2") != by_key
    assert response_session("resp_1") == "response:resp_1"
    # no conversation: each embedding or token count takes the strategy's own draw
    assert conversation_of("embeddings", {"input": "x"}, "abc", "key1") is None
    assert conversation_of("count_tokens", first, None, "key1") is None


def _session(headers: list[tuple[bytes, bytes]]) -> str | None:
    scope: dict[str, Any] = {"type": "http", "headers": headers, "client": ("127.0.0.1", 1)}
    context, _ = begin(scope, ())
    return context.session_id


def test_ingress_reads_the_agents_session_headers_the_strongest_first() -> None:
    assert _session([(b"x-claude-code-session-id", b"cc-1")]) == "cc-1"
    assert _session([(b"session-id", b"codex-1"), (b"thread-id", b"t")]) == "codex-1"
    assert _session([(b"conversation_id", b"old-codex")]) == "old-codex"
    assert _session([(b"x-session-id", b"oc"), (b"x-session-affinity", b"oc-a")]) == "oc-a"
    assert _session([(b"session-id", b"c"), (b"x-llmrelay-session-id", b"mine")]) == "mine"
    assert _session([(b"x-claude-code-session-id", b"  ")]) is None
    assert _session([(b"user-agent", b"x")]) is None
    assert all(name == name.lower() for name in SESSION_HEADERS)  # as ASGI hands them over


@pytest.mark.parametrize(
    ("agent", "operation"),
    [
        ("claude-code", "messages"),
        ("codex", "responses"),
        ("gemini-cli", "gemini_stream"),
        ("qwen-code", "chat"),
    ],
)
def test_an_agents_captured_turns_have_one_digest(agent: str, operation: str) -> None:
    """The two requests of a real agent's tool task (the second carries the call and its
    result) name one conversation; another task of the same agent names another."""
    tool = json.loads((CAPTURED / f"{agent}-tool.json").read_text())["exchanges"]
    plain = json.loads((CAPTURED / f"{agent}-plain.json").read_text())["exchanges"]
    first, second = (prefix_digest(operation, e["body"]) for e in tool[:2])
    assert first == second
    assert prefix_digest(operation, plain[-1]["body"]) != first


def test_a_tools_schema_is_not_read_only_its_name() -> None:
    first, _ = _messages_turns()
    described = copy.deepcopy(first)
    described["tools"][0]["description"] = "Runs a command."
    assert prefix_digest("messages", described) == prefix_digest("messages", first)

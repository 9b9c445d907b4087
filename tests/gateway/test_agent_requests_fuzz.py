"""Fuzzing the request shapes coding agents send and the Gemini-native API, as
test_requests_fuzz.py does for the hand-written seeds: the real requests of Claude Code, Codex,
Gemini CLI, opencode, Qwen Code, the OpenAI Agents SDK and pydantic-ai (tests/agents/captured:
system prompts, dozens of tools, thinking, tool calls and their results), each taken whole, then
with one part changed by hypothesis and with each top-level field and each place near the top
given each awkward value. Every step must accept or raise the gateway's own client error: any
other exception would be a 500 or a dropped stream."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmrelay.gateway.gemini import check_gemini
from llmrelay.gateway.gemini import estimate_tokens as count_gemini_tokens
from llmrelay.gateway.messages import check_messages
from llmrelay.gateway.requests import check_chat
from llmrelay.gateway.responses import check_responses
from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.chat_anthropic import chat_request_to_anthropic
from llmrelay.protocols.gemini_chat import gemini_request_to_chat
from llmrelay.protocols.responses_chat import responses_request_to_chat
from llmrelay.providers.base import Operation
from tests.gateway.test_requests_fuzz import (
    AWKWARD,
    EXTRA_FIELDS,
    FUZZ,
    _checked,
    _mutate,
    _places,
    _replaced,
    _tolerates,
    _translated,
    chat_path,
    messages_path,
    responses_path,
)

CAPTURED = Path(__file__).parents[1] / "agents" / "captured"


def gemini_path(payload: dict[str, Any]) -> None:
    """A Gemini-native generateContent body: checked, counted, translated to chat and on to
    Anthropic (a Gemini client on an Anthropic route)."""
    if not _checked(lambda p: check_gemini(p, Operation.GEMINI_STREAM), payload):
        return
    count_gemini_tokens(payload)
    chat = _translated(
        _tolerates(lambda: gemini_request_to_chat(payload, upstream_model="u", stream=True))
    )
    if chat is not None:
        chat_path(chat)
        _translated(_tolerates(lambda: chat_request_to_anthropic(chat, upstream_model="u")))


#: Each client protocol's path through the gateway (the captured files name the protocol).
PATH_OF: dict[str, Callable[[dict[str, Any]], None]] = {
    "openai_chat": chat_path,
    "anthropic": messages_path,
    "openai_responses": responses_path,
    "gemini": gemini_path,
}

#: A Gemini request with the parts the translator reads (the captured one has no thinking).
GEMINI = {
    "contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {
            "role": "model",
            "parts": [
                {"text": "thinking", "thought": True, "thoughtSignature": "c2ln"},
                {"functionCall": {"name": "f", "args": {"a": 1}}},
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"x": 1}}}]},
    ],
    "systemInstruction": {"parts": [{"text": "be brief"}]},
    "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object"}}]}],
    "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    "generationConfig": {
        "temperature": 0.5,
        "maxOutputTokens": 64,
        "stopSequences": ["x"],
        "responseMimeType": "application/json",
        "thinkingConfig": {"thinkingBudget": 128, "includeThoughts": True},
    },
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
}


def _seeds() -> dict[str, tuple[dict[str, Any], str]]:
    """The last request of each captured tool run (it carries the call and its result), and
    its protocol."""
    seeds = {"gemini-native": (GEMINI, "gemini")}
    for file in sorted(CAPTURED.glob("*-tool.json")):
        run = json.loads(file.read_text())
        seeds[file.stem] = (run["exchanges"][-1]["body"], run["protocol"])
    return seeds


SEEDS = _seeds()

#: Each protocol's own check and its translation to the hub (chat) or on from it.
CHECK: dict[str, Callable[[dict[str, Any]], Any]] = {
    "openai_chat": check_chat,
    "anthropic": lambda p: check_messages(p, counting=False),
    "openai_responses": check_responses,
    "gemini": lambda p: check_gemini(p, Operation.GEMINI_STREAM),
}
TRANSLATE: dict[str, Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]]] = {
    "openai_chat": lambda p: chat_request_to_anthropic(p, upstream_model="u"),
    "anthropic": lambda p: anthropic_request_to_chat(p, upstream_model="u"),
    "openai_responses": lambda p: responses_request_to_chat(p, upstream_model="u"),
    "gemini": lambda p: gemini_request_to_chat(p, upstream_model="u", stream=True),
}


def test_every_agent_of_the_matrix_has_a_seed() -> None:
    assert {"claude-code-tool", "codex-tool", "gemini-cli-tool", "qwen-code-tool"} <= set(SEEDS)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_an_agent_request_is_taken_whole(name: str) -> None:
    """An agent's real request is never refused: its protocol's check passes and it
    translates (raising here fails the test, where the fuzz tests tolerate a 400)."""
    body, protocol = SEEDS[name]
    CHECK[protocol](body)
    translated, _ = TRANSLATE[protocol](body)
    orjson.dumps(translated)
    PATH_OF[protocol](body)


@pytest.mark.parametrize("name", sorted(SEEDS))
@FUZZ
@given(data=st.data())
def test_an_agent_request_with_any_part_changed_is_taken_or_refused_with_a_400(
    name: str, data: st.DataObject
) -> None:
    body, protocol = SEEDS[name]
    PATH_OF[protocol](_mutate(data, body))


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_each_place_near_the_top_of_an_agent_request_replaced_by_awkward_values(
    name: str,
) -> None:
    """Systematic where hypothesis samples: every place up to three levels down (a message, its
    content, a tool) and every field the translators read, given each awkward value."""
    body, protocol = SEEDS[name]
    path = PATH_OF[protocol]
    for at in _places(body)[1:]:
        if len(at) <= 3:
            for value in AWKWARD:
                path(_replaced(body, at, value))
    for field in (*EXTRA_FIELDS, *GEMINI):
        for value in AWKWARD:
            path({**body, field: value})

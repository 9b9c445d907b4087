"""Screening bodies: masking changes only text values (valid JSON, tool calls and schemas
untouched), blocking is decided after every field was seen, hits keep no text."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.guardrails.fields import ANSWER_WALKERS, REQUEST_WALKERS
from llmrelay.guardrails.policy import Rule, compile_policy
from llmrelay.guardrails.screen import MAX_HITS, ScanLimitExceeded, Screening, redact

EMAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"
PHONE = "+44 20 7946 0958"
AWS = "AKIAIOSFODNN7EXAMPLE"


def _rules(*rules: dict[str, Any]) -> tuple[Rule, ...]:
    return compile_policy("pol-id", "pol", rules).rules


MASK_ALL = _rules({"detector": "pii", "action": "mask"}, {"detector": "secrets", "action": "mask"})


def _screen(
    operation: str, body: dict[str, Any], rules: tuple[Rule, ...], max_chars: int = 10**6
) -> Screening:
    screening = Screening(rules, max_chars)
    REQUEST_WALKERS[operation](body, screening)
    return screening


def test_chat_masking_changes_text_and_keeps_tools_byte_identical() -> None:
    tool_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": orjson.dumps({"email": EMAIL}).decode()},
    }
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": f"find a user by email, e.g. {EMAIL}",
                "parameters": {"type": "object", "properties": {"email": {"type": "string"}}},
            },
        }
    ]
    body: dict[str, Any] = {
        "model": "chat",
        "tools": tools,
        "messages": [
            {"role": "system", "content": f"Escalate to {EMAIL}."},
            {
                "role": "user",
                "name": EMAIL,
                "content": [
                    {"type": "text", "text": f"my card is {CARD}"},
                    {"type": "image_url", "image_url": {"url": f"https://x.io/{EMAIL}.png"}},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": [tool_call]},
            {"role": "tool", "tool_call_id": "call_1", "content": f"found {EMAIL}, phone {PHONE}"},
        ],
    }
    original = copy.deepcopy(body)
    screening = _screen("chat", body, MASK_ALL)
    assert screening.changed and screening.blocked is None
    messages: list[dict[str, Any]] = body["messages"]
    assert messages[0]["content"] == "Escalate to [EMAIL]."
    assert messages[1]["content"][0]["text"] == "my card is [CARD]"
    assert messages[3]["content"] == "found [EMAIL], phone [PHONE]"
    # untouched: names, tool calls (their argument JSON), tool schemas, non-text parts
    assert messages[1]["name"] == EMAIL
    assert orjson.dumps(messages[2]) == orjson.dumps(original["messages"][2])
    assert orjson.dumps(body["tools"]) == orjson.dumps(original["tools"])
    assert messages[1]["content"][1] == original["messages"][1]["content"][1]
    orjson.loads(orjson.dumps(body))  # still JSON


def test_hits_count_matches_per_rule_kind_and_field_without_text() -> None:
    body = {
        "messages": [
            {"role": "user", "content": f"{EMAIL} and bob@example.org, card {CARD}"},
            {"role": "user", "content": f"again {EMAIL}"},
        ]
    }
    screening = _screen("chat", body, MASK_ALL)
    found = sorted((h.rule.name, h.kind, h.field, h.count, h.chars) for h in screening.hits)
    assert found == [
        ("pii", "card", "messages[0].content", 1, len(CARD)),
        ("pii", "email", "messages[0].content", 2, len(EMAIL) + len("bob@example.org")),
        ("pii", "email", "messages[1].content", 1, len(EMAIL)),
    ]
    for hit in screening.hits:
        assert EMAIL not in repr(vars(hit) if hasattr(hit, "__dict__") else hit.field)


def test_audit_changes_nothing_and_block_is_reported_with_its_field() -> None:
    rules = _rules(
        {"detector": "email", "action": "audit"},
        {"detector": "aws_access_key", "action": "block"},
    )
    body = {
        "messages": [
            {"role": "user", "content": f"mail {EMAIL}"},
            {"role": "user", "content": f"key {AWS} please"},
        ]
    }
    screening = _screen("chat", body, rules)
    assert body["messages"][0]["content"] == f"mail {EMAIL}"  # audit: left as it was
    blocked = screening.blocked
    assert blocked is not None
    assert (blocked.rule.name, blocked.kind, blocked.field) == (
        "aws_access_key",
        "aws_access_key",
        "messages[1].content",
    )
    assert body["messages"][1]["content"] == "key [AWS_ACCESS_KEY] please"  # never sent on
    assert {h.kind for h in screening.hits} == {"email", "aws_access_key"}


@pytest.mark.parametrize(
    ("operation", "body", "fields"),
    [
        (
            "messages",
            {
                "system": [{"type": "text", "text": EMAIL}],
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": EMAIL},
                            {
                                "type": "tool_result",
                                "tool_use_id": "t1",
                                "content": [{"type": "text", "text": EMAIL}],
                            },
                            {"type": "tool_result", "tool_use_id": "t2", "content": EMAIL},
                        ],
                    },
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "thinking", "thinking": EMAIL, "signature": "sig"},
                            {"type": "tool_use", "id": "t3", "name": "f", "input": {"to": EMAIL}},
                        ],
                    },
                    {"role": "user", "content": EMAIL},
                ],
            },
            [
                "system[0].text",
                "messages[0].content[0].text",
                "messages[0].content[1].content[0].text",
                "messages[0].content[2].content",
                "messages[2].content",
            ],
        ),
        (
            "responses",
            {
                "instructions": EMAIL,
                "input": [
                    {"role": "user", "content": EMAIL},
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": EMAIL}],
                    },
                    {
                        "type": "function_call",
                        "call_id": "c",
                        "name": "f",
                        "arguments": f'{{"a":"{EMAIL}"}}',
                    },
                    {"type": "function_call_output", "call_id": "c", "output": EMAIL},
                ],
            },
            [
                "instructions",
                "input[0].content",
                "input[1].content[0].text",
                "input[3].output",
            ],
        ),
        ("responses", {"input": EMAIL}, ["input"]),
        ("embeddings", {"input": [EMAIL, "plain", EMAIL]}, ["input[0]", "input[2]"]),
        ("embeddings", {"input": [[1, 2, 3]]}, []),
    ],
)
def test_each_protocol_screens_its_text_fields(
    operation: str, body: dict[str, Any], fields: list[str]
) -> None:
    screening = _screen(operation, body, _rules({"detector": "email", "action": "mask"}))
    assert sorted(h.field for h in screening.hits) == sorted(fields)
    assert EMAIL in orjson.dumps(body).decode() or not fields or operation != "messages"


def test_messages_tool_use_and_thinking_are_untouched() -> None:
    body = {
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": EMAIL, "signature": "sig"},
                    {"type": "tool_use", "id": "t3", "name": "f", "input": {"to": EMAIL}},
                ],
            }
        ]
    }
    original = copy.deepcopy(body)
    assert not _screen("messages", body, MASK_ALL).changed
    assert body == original


@pytest.mark.parametrize(
    ("operation", "answer", "field"),
    [
        (
            "chat",
            {"choices": [{"message": {"role": "assistant", "content": EMAIL}}]},
            "choices[0].message.content",
        ),
        ("messages", {"content": [{"type": "text", "text": EMAIL}]}, "content[0].text"),
        (
            "responses",
            {"output": [{"type": "message", "content": [{"type": "output_text", "text": EMAIL}]}]},
            "output[0].content[0].text",
        ),
    ],
)
def test_answers_are_screened_where_their_text_is(
    operation: str, answer: dict[str, Any], field: str
) -> None:
    screening = Screening(_rules({"detector": "email", "action": "mask"}), 10**6)
    ANSWER_WALKERS[operation](answer, screening)
    assert [h.field for h in screening.hits] == [field]
    assert EMAIL not in orjson.dumps(answer).decode()


def test_more_text_than_the_limit_is_refused() -> None:
    body = {
        "messages": [{"role": "user", "content": "x" * 60}, {"role": "user", "content": "y" * 50}]
    }
    with pytest.raises(ScanLimitExceeded):
        _screen("chat", body, MASK_ALL, max_chars=100)


def test_hit_rows_per_body_are_bounded() -> None:
    body = {"messages": [{"role": "user", "content": EMAIL} for _ in range(MAX_HITS + 50)]}
    hits = _screen("chat", body, MASK_ALL).hits
    assert len(hits) == MAX_HITS
    assert sum(h.count for h in hits) == MAX_HITS + 50
    assert hits[-1].field == "(more fields)"


@pytest.mark.parametrize(
    ("text", "replacements", "expected"),
    [
        ("abcdef", [(1, 3, "[X]")], "a[X]def"),
        ("abcdef", [(3, 5, "[B]"), (0, 2, "[A]")], "[A]c[B]f"),
        ("abcdef", [(1, 4, "[A]"), (2, 6, "[B]")], "a[A]"),  # overlapping: merged
        ("abcdef", [(1, 3, "[A]"), (1, 5, "[B]")], "a[B]f"),  # same start: the longest
        ("abcdef", [(0, 6, "[A]"), (2, 3, "[B]")], "[A]"),  # contained
    ],
)
def test_redact(text: str, replacements: list[tuple[int, int, str]], expected: str) -> None:
    assert redact(text, replacements) == expected


# -- any chat body --------------------------------------------------------------------------

_FRAGMENTS = [EMAIL, CARD, PHONE, AWS, "DE89 3704 0044 0532 0130 00", '"quoted"', "\\", "\n", "é☕"]
_text = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(_FRAGMENTS)), max_size=6).map(
    " ".join
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": _text})}
    ),
)
_tool_call = st.fixed_dictionaries(
    {
        "id": _text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": _text, "arguments": _json.map(lambda v: orjson.dumps(v).decode())}
        ),
    }
)
_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.one_of(st.none(), _text, st.lists(_part, max_size=3)),
    },
    optional={"name": _text, "tool_calls": st.lists(_tool_call, max_size=2), "tool_call_id": _text},
)
_body = st.fixed_dictionaries(
    {"model": _text, "messages": st.lists(_message, max_size=5)},
    optional={
        "tools": st.lists(_json, max_size=2),
        "temperature": st.floats(0, 2),
        "metadata": _json,
    },
)


def _skeleton(body: dict[str, Any]) -> Any:
    """The body with every text value the walker may change replaced by a marker."""
    out = copy.deepcopy(body)
    for message in out["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = "<text>"
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    part["text"] = "<text>"
    return out


@settings(max_examples=60, deadline=None)
@given(_body)
def test_masking_any_chat_body_keeps_json_and_everything_but_text(body: dict[str, Any]) -> None:
    original = copy.deepcopy(body)
    before = orjson.dumps(original)
    _screen("chat", body, MASK_ALL)
    after = orjson.dumps(body)
    orjson.loads(after)  # valid JSON
    assert orjson.dumps(_skeleton(body)) == orjson.dumps(_skeleton(original))
    for masked, kept in zip(body["messages"], original["messages"], strict=True):
        for field in ("role", "name", "tool_calls", "tool_call_id"):
            assert orjson.dumps(masked.get(field)) == orjson.dumps(kept.get(field))
    assert orjson.dumps(body.get("tools")) == orjson.dumps(original.get("tools"))
    if CARD not in before.decode() and EMAIL not in before.decode():
        return
    assert EMAIL not in _texts(body) and CARD not in _texts(body)


def _texts(body: dict[str, Any]) -> str:
    found = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            found.append(content)
        elif isinstance(content, list):
            found += [p["text"] for p in content if p.get("type") == "text"]
    return "\n".join(found)

"""The tpm estimate, by property: the request path's inlined walk against the plain one it
replaced (same characters, same output allowance, for any JSON-like payload)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.limits.estimate import CHARS_PER_TOKEN, _chars, estimate_tokens
from llmrelay.providers.base import Operation

_OTHER = ("system", "tools", "input", "instructions", "prompt")
_OUTPUT = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def reference(operation: Operation, payload: dict[str, Any], default_output: int) -> int:
    """The estimate as first written: every field looked up, every message walked."""
    chars = 0
    messages = payload.get("messages")
    if type(messages) is list:
        for message in messages:
            if type(message) is dict:
                content = message.get("content")
                if type(content) is str:
                    chars += len(content)
                elif content is not None:
                    chars += _chars(content, 1)
                calls = message.get("tool_calls")
                if calls is not None:
                    chars += _chars(calls, 1)
    for name in _OTHER:
        value = payload.get(name)
        if value is not None:
            chars += _chars(value, 0)
    output = 0
    if operation is not Operation.EMBEDDINGS:
        output = default_output
        for name in _OUTPUT:
            asked = payload.get(name)
            if type(asked) is int and asked > 0:
                output = asked
                break
    return max(1, chars // CHARS_PER_TOKEN + output)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5000) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["type", "text", "url", "data", "x"]), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={"content": JSON, "tool_calls": JSON, "name": st.text(max_size=5)},
)
PAYLOAD = st.fixed_dictionaries(
    {"model": st.just("m")},
    optional={
        "messages": st.lists(MESSAGE | JSON, max_size=5) | JSON,
        **dict.fromkeys(_OTHER, JSON),
        **dict.fromkeys(_OUTPUT, st.integers(-3, 9000) | st.booleans() | st.none() | JSON),
    },
)


@settings(max_examples=400, deadline=None)
@given(
    operation=st.sampled_from(list(Operation)),
    payload=PAYLOAD,
    default_output=st.integers(0, 2048),
)
def test_estimate_is_the_plain_walk(
    operation: Operation, payload: dict[str, Any], default_output: int
) -> None:
    assert estimate_tokens(operation, payload, default_output) == reference(
        operation, payload, default_output
    )


def test_a_chat_request() -> None:
    payload = {
        "messages": [
            {"role": "system", "content": "x" * 40},
            {"role": "user", "content": [{"type": "text", "text": "y" * 20}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "abcd"}]},
        ],
        "max_tokens": 32,
    }
    assert estimate_tokens(Operation.CHAT, payload, 512) == (40 + 20 + 4 + 4) // 4 + 32

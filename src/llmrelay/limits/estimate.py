"""The tpm reservation taken at admission: a cheap estimate, corrected by the real usage
when the request ends (so only its error, never its total, rides on the estimate)."""

from __future__ import annotations

from typing import Any, Final

from llmrelay.providers.base import Operation

CHARS_PER_TOKEN: Final = 4
#: Fields that hold the prompt besides `messages`, per client protocol.
_OTHER_PROMPT_FIELDS: Final = ("system", "tools", "input", "instructions", "prompt")
_OUTPUT_FIELDS: Final = ("max_completion_tokens", "max_tokens", "max_output_tokens")
#: Looked up once: an enum member read from its class costs about a microsecond.
_EMBEDDINGS: Final = Operation.EMBEDDINGS


def estimate_tokens(operation: Operation, payload: dict[str, Any], default_output: int) -> int:
    """Prompt characters / 4, plus the output the request allows (or `default_output`;
    nothing for embeddings). At least 1.

    Every admission of a key with a tpm limit pays for this, so the usual case is inline:
    messages whose content is a string, and no other prompt field (five compiled `in`
    tests of the dict say so for less than one call of a set method)."""
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
                if "tool_calls" in message:
                    calls = message["tool_calls"]
                    if calls is not None:
                        chars += _chars(calls, 1)
    elif "contents" in payload:  # Gemini's (never with `messages`: no cost to the others)
        return _gemini_tokens(payload, default_output)
    for name in _OTHER_PROMPT_FIELDS:
        if name in payload:
            value = payload[name]
            if value is not None:
                chars += _chars(value, 0)
    output = 0
    if operation is not _EMBEDDINGS:
        output = default_output
        for name in _OUTPUT_FIELDS:
            asked = payload.get(name)
            if type(asked) is int and asked > 0:
                output = asked
                break
    tokens = chars // CHARS_PER_TOKEN + output
    return tokens if tokens > 1 else 1


def _gemini_tokens(payload: dict[str, Any], default_output: int) -> int:
    """A generateContent request: its contents, system instruction and tools, and its
    generationConfig.maxOutputTokens (or `default_output`)."""
    chars = _chars(payload["contents"], 0)
    for name in ("systemInstruction", "tools"):
        value = payload.get(name)
        if value is not None:
            chars += _chars(value, 0)
    output = default_output
    config = payload.get("generationConfig")
    if type(config) is dict:
        asked = config.get("maxOutputTokens")
        if type(asked) is int and asked > 0:
            output = asked
    tokens = chars // CHARS_PER_TOKEN + output
    return tokens if tokens > 1 else 1


#: Fields holding images or files (URLs, base64): their length says nothing about tokens.
_SKIPPED: Final = frozenset({"data", "url", "image_url", "file_data", "source"})


def _chars(value: Any, depth: int) -> int:
    """Characters of text in a JSON value, images and files left out (the real usage
    settles what they cost)."""
    if type(value) is str:
        return len(value)
    if depth > 8:
        return 0
    if type(value) is list:
        return sum(_chars(item, depth + 1) for item in value)
    if type(value) is dict:
        return sum(_chars(v, depth + 1) for k, v in value.items() if k not in _SKIPPED)
    return 0

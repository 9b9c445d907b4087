"""Fuzzing what a client's request body meets before any provider sees it: the JSON parse and
the checks of each route (gateway/requests.py and its siblings), then everything that reads
the accepted payload on the way (capability needs, the rate-limit estimate, the token count)
and the request translators to each provider protocol.

Fed arbitrary bytes, arbitrary JSON values and valid requests with one part replaced by
anything, each step must either accept or raise the gateway's own client error
(InvalidRequest, a 400 in the route's protocol; TranslationError, which the executor turns
into one); any other exception would be a 500, or a dropped stream. An accepted translation
must still be JSON, since it is sent as such. Bounded for CI: derandomized, 100 examples
per test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmrelay.gateway.capabilities import needs_of
from llmrelay.gateway.errors import InvalidRequest
from llmrelay.gateway.messages import check_messages
from llmrelay.gateway.messages import estimate_tokens as count_message_tokens
from llmrelay.gateway.requests import check_chat, check_embeddings, parse_object
from llmrelay.gateway.responses import check_responses
from llmrelay.limits.estimate import estimate_tokens
from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.chat_anthropic import chat_request_to_anthropic
from llmrelay.protocols.chat_gemini import chat_request_to_gemini
from llmrelay.protocols.gemini_embeddings import embeddings_request_to_gemini
from llmrelay.protocols.generation import chat_request, check_generate
from llmrelay.protocols.responses_chat import responses_request_to_chat
from llmrelay.protocols.translation import TranslationError
from llmrelay.providers.base import Operation

FUZZ = settings(
    derandomize=True,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: What orjson can give back from a request body: 64-bit integers, finite floats.
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "",
            "user",
            "assistant",
            "system",
            "tool",
            "developer",
            "text",
            "image_url",
            "function",
            "auto",
            "none",
            "required",
            "json_schema",
            "data:image/png;base64,iVBORw0KGgo=",
            "data:;base64,",
            "https://example.com/a.png",
            "{}",
            "{not json",
        ]
    )
)
KEYS = st.sampled_from(
    [
        "model",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "name",
        "tool_calls",
        "tool_call_id",
        "id",
        "function",
        "arguments",
        "parameters",
        "tools",
        "tool_choice",
        "image_url",
        "url",
        "source",
        "input",
        "input_text",
        "output",
        "call_id",
        "max_tokens",
        "stream",
        "stream_options",
        "stop",
        "system",
        "prompt",
        "response_format",
        "json_schema",
        "schema",
        "thinking",
        "metadata",
        "n",
    ]
) | st.text(max_size=8)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)

TOOL = {
    "type": "function",
    "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
}
CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ],
    "tools": [TOOL],
    "tool_choice": "auto",
    "max_tokens": 10,
    "stop": ["x"],
    "stream": True,
    "stream_options": {"include_usage": True},
}
MESSAGES = {
    "model": "m",
    "max_tokens": 10,
    "system": [{"type": "text", "text": "be brief"}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}],
        },
    ],
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "stop_sequences": ["x"],
    "stream": True,
    "metadata": {"user_id": "u"},
}
RESPONSES = {
    "model": "m",
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": "auto",
    "max_output_tokens": 10,
    "text": {"format": {"type": "text"}},
    "stream": True,
}
EMBEDDINGS = {"model": "m", "input": ["a", "b"], "encoding_format": "float", "dimensions": 8}
GENERATE = {"model": "m", "prompt": "hi", "system": "s", "max_tokens": 5, "metadata": {"a": "b"}}


def _tolerates(step: Callable[[], Any]) -> Any:
    """The step's result, or None when it refused with the gateway's own client error."""
    try:
        return step()
    except (InvalidRequest, TranslationError):
        return None


def _translated(result: tuple[dict[str, Any], list[str]] | None) -> dict[str, Any] | None:
    if result is None:
        return None
    body, dropped = result
    orjson.dumps(body)  # it goes upstream as JSON
    assert all(isinstance(field, str) for field in dropped)
    return body


def chat_path(payload: dict[str, Any]) -> None:
    if not _checked(check_chat, payload):
        return
    needs_of(payload)
    estimate_tokens(Operation.CHAT, payload, 512)
    _translated(_tolerates(lambda: chat_request_to_anthropic(payload, upstream_model="u")))
    _translated(_tolerates(lambda: chat_request_to_gemini(payload)))


def messages_path(payload: dict[str, Any]) -> None:
    if not _checked(lambda p: check_messages(p, counting=False), payload):
        return
    count_message_tokens(payload)
    estimate_tokens(Operation.CHAT, payload, 512)
    chat = _translated(_tolerates(lambda: anthropic_request_to_chat(payload, upstream_model="u")))
    if chat is not None:  # Messages -> Chat -> Gemini, as a Gemini route takes it
        _translated(_tolerates(lambda: chat_request_to_gemini(chat)))


def responses_path(payload: dict[str, Any]) -> None:
    if not _checked(check_responses, payload):
        return
    estimate_tokens(Operation.RESPONSES, payload, 512)
    chat = _translated(_tolerates(lambda: responses_request_to_chat(payload, upstream_model="u")))
    if chat is not None:  # Responses -> Chat -> Anthropic
        _translated(_tolerates(lambda: chat_request_to_anthropic(chat, upstream_model="u")))


def embeddings_path(payload: dict[str, Any]) -> None:
    if not _checked(check_embeddings, payload):
        return
    estimate_tokens(Operation.EMBEDDINGS, payload, 512)
    body = _tolerates(lambda: embeddings_request_to_gemini(payload, upstream_model="u"))
    if body is not None:
        orjson.dumps(body)


def generate_path(payload: dict[str, Any]) -> None:
    if not _checked(check_generate, payload):
        return
    chat = chat_request(payload)
    orjson.dumps(chat)
    chat_path(chat)


def _checked(check: Callable[[dict[str, Any]], Any], payload: dict[str, Any]) -> bool:
    try:
        check(payload)
    except InvalidRequest:
        return False
    return True


PATHS = {
    "chat": (CHAT, chat_path),
    "messages": (MESSAGES, messages_path),
    "responses": (RESPONSES, responses_path),
    "embeddings": (EMBEDDINGS, embeddings_path),
    "generate": (GENERATE, generate_path),
}


def _body(raw: bytes) -> dict[str, Any] | None:
    try:
        return parse_object(raw)
    except InvalidRequest:
        return None


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_get_a_400(raw: bytes) -> None:
    payload = _body(raw)
    if payload is not None:
        for _, path in PATHS.values():
            path(payload)


@FUZZ
@given(JSON)
def test_any_json_value_is_taken_or_refused_with_a_400(value: Any) -> None:
    payload = _body(orjson.dumps(value))
    if payload is None:
        assert not isinstance(value, dict)
        return
    for _, path in PATHS.values():
        path(payload)


@FUZZ
@given(st.dictionaries(KEYS, JSON, max_size=8))
def test_any_json_object_is_taken_or_refused_with_a_400(payload: dict[str, Any]) -> None:
    for _, path in PATHS.values():
        path(payload)


def _mutate(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """`value` with one part (chosen by hypothesis) replaced by any JSON, or removed."""
    if isinstance(value, dict) and value and depth < 6:
        key = data.draw(st.sampled_from(sorted(value)))
        action = data.draw(st.sampled_from(["descend", "replace", "remove", "add"]))
        changed = dict(value)
        if action == "descend":
            changed[key] = _mutate(data, value[key], depth + 1)
        elif action == "replace":
            changed[key] = data.draw(JSON)
        elif action == "remove":
            del changed[key]
        else:
            changed[data.draw(KEYS)] = data.draw(JSON)
        return changed
    if isinstance(value, list) and value and depth < 6:
        index = data.draw(st.integers(0, len(value) - 1))
        action = data.draw(st.sampled_from(["descend", "replace", "remove", "duplicate"]))
        changed_list = list(value)
        if action == "descend":
            changed_list[index] = _mutate(data, value[index], depth + 1)
        elif action == "replace":
            changed_list[index] = data.draw(JSON)
        elif action == "remove":
            del changed_list[index]
        else:
            changed_list.insert(index, value[index])
        return changed_list
    return data.draw(JSON)


@pytest.mark.parametrize("route", sorted(PATHS))
@FUZZ
@given(data=st.data())
def test_a_valid_request_with_any_part_changed_is_taken_or_refused_with_a_400(
    route: str, data: st.DataObject
) -> None:
    base, path = PATHS[route]
    payload = base
    for _ in range(data.draw(st.integers(1, 3))):
        payload = _mutate(data, payload)
    parsed = _body(orjson.dumps(payload))
    if parsed is not None:
        path(parsed)


@pytest.mark.parametrize("route", sorted(PATHS))
def test_the_valid_requests_are_taken_whole(route: str) -> None:
    """The seeds are themselves accepted, so the mutations start from a request that gets
    through every step (else the fuzzing would exercise only the refusals)."""
    base, _ = PATHS[route]
    payload = parse_object(orjson.dumps(base))
    if route == "chat":
        check_chat(payload)
        assert chat_request_to_anthropic(payload, upstream_model="u")[0]["messages"]
        assert chat_request_to_gemini(payload)[0]["contents"]
    elif route == "messages":
        check_messages(payload, counting=False)
        chat, _ = anthropic_request_to_chat(payload, upstream_model="u")
        assert chat_request_to_gemini(chat)[0]["contents"]
    elif route == "responses":
        check_responses(payload)
        chat, _ = responses_request_to_chat(payload, upstream_model="u")
        assert chat_request_to_anthropic(chat, upstream_model="u")[0]["messages"]
    elif route == "embeddings":
        check_embeddings(payload)
        assert embeddings_request_to_gemini(payload, upstream_model="u")
    else:
        check_generate(payload)
        check_chat(chat_request(payload))


#: Values of every JSON type, and shapes that have tripped translators (hashability, nesting).
AWKWARD: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1.5,
    2**64 - 1,
    "",
    "x",
    "auto",
    [],
    [1],
    [None],
    ["x"],
    [{}],
    [[]],
    {},
    {"a": 1},
    {"type": "function"},
    {"type": "allowed_tools", "allowed_tools": [1]},
    {"type": "allowed_tools", "allowed_tools": {"tools": 1}},
    {"type": "allowed_tools", "allowed_tools": {"tools": [1]}},
)
#: Fields the translators read that the seeds do not all carry.
EXTRA_FIELDS = (
    "reasoning_effort",
    "modalities",
    "functions",
    "function_call",
    "tool_choice",
    "tools",
    "logprobs",
    "n",
    "seed",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "stop_sequences",
    "include",
    "text",
    "reasoning",
    "instructions",
    "encoding_format",
    "dimensions",
    "background",
    "prompt",
    "input",
    "messages",
    "system",
    "metadata",
    "thinking",
    "output_config",
    "output_format",
    "response_format",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "user",
    "webhook_url",
    "presence_penalty",
    "audio",
    "parallel_tool_calls",
)


def _places(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value inside `value` (dict keys and list positions)."""
    found = [at]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _places(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _places(inner, (*at, index))
    return found


def _replaced(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    if not at:
        return new
    head, *rest = at
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replaced(value[head], tuple(rest), new)
    return copy


@pytest.mark.parametrize("route", sorted(PATHS))
def test_every_part_of_a_valid_request_replaced_by_awkward_values(route: str) -> None:
    """Systematic where hypothesis samples: each place of the seed (and each field the
    translators read) given each awkward value, about 2,500 requests per route."""
    base, path = PATHS[route]
    for at in _places(base)[1:]:
        for value in AWKWARD:
            path(_replaced(base, at, value))
    for field in EXTRA_FIELDS:
        for value in AWKWARD:
            path({**base, field: value})

"""Chat Completions <-> Gemini generateContent: the request and the whole answer."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.protocols import gemini
from llmrelay.protocols.chat_gemini import chat_request_to_gemini, gemini_response_to_chat
from llmrelay.protocols.translation import TranslationError
from tests.protocols.gemini_support import chat, fixture, tool, translated, user

CALL_ID = re.compile(r"call_[0-9a-f]{24}")


def masked_call_ids(value: Any) -> Any:
    """The value with each generated tool call id checked and replaced by "<call id>"."""
    if isinstance(value, dict):
        out = {k: masked_call_ids(v) for k, v in value.items()}
        if isinstance(value.get("id"), str) and value.get("type") == "function":
            assert CALL_ID.fullmatch(value["id"]), value["id"]
            out["id"] = "<call id>"
        return out
    if isinstance(value, list):
        return [masked_call_ids(v) for v in value]
    return value


def call(ident: str, name: str, arguments: str, **extra: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"id": ident, "type": "function", "function": function, **extra}


# Golden fixtures ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["request_function_calling.json", "request_multiturn.json"])
def test_requests_match_the_documented_gemini_bodies(name: str) -> None:
    case = fixture(name)
    body, dropped = chat_request_to_gemini(case["chat"])
    assert body == case["gemini"]
    assert sorted(dropped) == case["dropped"]


@pytest.mark.parametrize(
    "name",
    ["response_text.json", "response_function_call.json", "response_prompt_blocked.json"],
)
def test_answers_match_the_expected_completions(name: str) -> None:
    case = fixture(name)
    completion = gemini_response_to_chat(case["gemini"], model=case["model"])
    assert isinstance(completion.pop("created"), int)
    assert masked_call_ids(completion) == case["chat"]


# Request: fields ----------------------------------------------------------------------------


def test_generation_settings_map_to_generation_config() -> None:
    body, dropped = chat_request_to_gemini(
        chat(
            temperature=0,
            top_p=0.9,
            top_k=40,
            max_tokens=50,
            max_completion_tokens=100,
            stop=["a", "b"],
            n=2,
            seed=7,
            presence_penalty=0.5,
            frequency_penalty=0,
            response_format={"type": "json_object"},
            reasoning_effort="low",
            logit_bias={"1": 2},
            stream_options={"include_usage": True},
            logprobs=False,
            some_future_field=1,
        )
    )
    assert body["generationConfig"] == {
        "temperature": 0,
        "topP": 0.9,
        "topK": 40,
        "maxOutputTokens": 100,
        "stopSequences": ["a", "b"],
        "candidateCount": 2,
        "seed": 7,
        "presencePenalty": 0.5,
        "responseMimeType": "application/json",
        "thinkingConfig": {"thinkingBudget": 1024},
    }
    assert dropped == ["logit_bias", "stream_options", "logprobs", "some_future_field"]


def test_json_schema_goes_as_json_schema_and_one_choice_sets_no_count() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    config = translated(response_format=response_format, n=1, max_tokens=5)["generationConfig"]
    assert config == {
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
        "maxOutputTokens": 5,
    }


def test_a_plain_request_has_only_contents() -> None:
    assert translated(response_format={"type": "text"}, stop=None) == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}]
    }


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"response_format": {"type": "grammar"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"messages": []}, "messages"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools"),
    ],
)
def test_what_gemini_cannot_honour_is_refused(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(TranslationError) as raised:
        chat_request_to_gemini(chat(**fields))
    assert raised.value.param == param


# Request: messages --------------------------------------------------------------------------


def test_system_and_developer_messages_become_the_system_instruction() -> None:
    body = translated(
        messages=[
            {"role": "system", "content": "Be brief."},
            user("hi"),
            {"role": "developer", "content": [{"type": "text", "text": "Use metric."}]},
        ]
    )
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}, {"text": "Use metric."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


@pytest.mark.parametrize(
    ("url", "mime"),
    [
        ("https://example.com/cat.PNG?size=large", "image/png"),
        ("https://example.com/cat.webp", "image/webp"),
        ("http://example.com/photo", "image/jpeg"),
    ],
)
def test_image_urls_become_file_data_with_a_guessed_type(url: str, mime: str) -> None:
    body = translated(messages=[user([{"type": "image_url", "image_url": {"url": url}}])])
    assert body["contents"][0]["parts"] == [{"fileData": {"mimeType": mime, "fileUri": url}}]


def test_audio_and_inline_files_become_inline_data() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    pdf = {
        "type": "file",
        "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
    }
    body = translated(messages=[user([audio, pdf])])
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}},
    ]


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "image_url", "image_url": {"url": "data:image/png,notbase64"}}],
        [{"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}],
        [{"type": "file", "file": {"file_id": "file-abc"}}],
        [{"type": "video", "video": {}}],
    ],
)
def test_content_gemini_cannot_reach_is_refused(content: list[dict[str, Any]]) -> None:
    with pytest.raises(TranslationError) as raised:
        translated(messages=[user(content)])
    assert raised.value.param == "messages"


def test_consecutive_tool_results_share_one_user_turn_named_by_their_calls() -> None:
    calls = [call("a", "get_weather", '{"city": "Paris"}'), call("b", "get_time", "")]
    body = translated(
        messages=[
            user("weather and time?"),
            {"role": "assistant", "content": "Checking.", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "b", "content": "12:00"},
            {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "[1, 2]"}]},
            user("thanks"),
        ]
    )
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "user"]
    assert body["contents"][1]["parts"] == [
        {"text": "Checking."},
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
            "thoughtSignature": gemini.SKIP_SIGNATURE,
        },
        {"functionCall": {"name": "get_time", "args": {}}},
    ]
    assert body["contents"][2]["parts"] == [
        {"functionResponse": {"name": "get_time", "response": {"result": "12:00"}}},
        {"functionResponse": {"name": "get_weather", "response": {"result": [1, 2]}}},
    ]


def test_an_echoed_signature_is_kept_and_no_placeholder_is_added() -> None:
    extra = {"google": {"thought_signature": "c2ln"}}
    calls = [call("a", "f", "{}", extra_content=extra), call("b", "f", "{}")]
    body = translated(messages=[user("go"), {"role": "assistant", "tool_calls": calls}])
    parts = body["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts] == ["c2ln", None]


def test_legacy_function_messages_and_functions_are_understood() -> None:
    body = translated(
        messages=[
            user("add"),
            {"role": "assistant", "function_call": {"name": "add", "arguments": '{"a": 1}'}},
            {"role": "function", "name": "add", "content": "2"},
        ],
        functions=[{"name": "add", "parameters": {"properties": {"a": {"type": "integer"}}}}],
        function_call={"name": "add"},
    )
    assert body["contents"][2]["parts"][0]["functionResponse"]["response"] == {"result": 2}
    assert body["tools"][0]["functionDeclarations"][0]["parameters"]["type"] == "object"
    assert body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["add"]}
    }


@pytest.mark.parametrize(
    "messages",
    [
        [user("x"), {"role": "assistant", "tool_calls": [call("a", "f", "{not json")]}],
        [user("x"), {"role": "assistant", "tool_calls": [call("a", "f", "[1]")]}],
        [user("x"), {"role": "tool", "tool_call_id": "unknown", "content": "1"}],
        [{"role": "critic", "content": "x"}],
    ],
)
def test_broken_conversations_are_refused_naming_messages(messages: list[Any]) -> None:
    with pytest.raises(TranslationError) as raised:
        translated(messages=messages)
    assert raised.value.param == "messages"


# Request: tools -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "b"}},
            {"mode": "ANY", "allowedFunctionNames": ["b"]},
        ),
    ],
)
def test_tool_choice_maps_to_function_calling_config(choice: Any, config: dict[str, Any]) -> None:
    body = translated(tools=[tool("a"), tool("b")], tool_choice=choice)
    assert body["toolConfig"] == {"functionCallingConfig": config}
    assert [d["name"] for d in body["tools"][0]["functionDeclarations"]] == ["a", "b"]


def test_allowed_tools_declares_only_those_tools() -> None:
    allowed = {"mode": "required", "tools": [{"type": "function", "function": {"name": "b"}}]}
    body = translated(
        tools=[tool("a"), tool("b")],
        tool_choice={"type": "allowed_tools", "allowed_tools": allowed},
    )
    assert body["tools"] == [{"functionDeclarations": [{"name": "b"}]}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


# Answer -------------------------------------------------------------------------------------


def test_every_candidate_is_a_choice_and_a_missing_id_is_made() -> None:
    candidates = [
        {"content": {"parts": [{"text": "one"}]}, "finishReason": "STOP", "index": 0},
        {
            "content": {"parts": [{"text": "tw"}, {"text": "o"}]},
            "finishReason": "MAX_TOKENS",
            "index": 1,
        },
        {"finishReason": "SAFETY", "index": 2},
    ]
    completion = gemini_response_to_chat({"candidates": candidates}, model="x")
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", completion["id"])
    assert "usage" not in completion
    assert [
        (c["index"], c["message"]["content"], c["finish_reason"]) for c in completion["choices"]
    ] == [
        (0, "one", "stop"),
        (1, "two", "length"),
        (2, "", "content_filter"),
    ]


# Property: a conversation keeps its turns, texts, tools and calls ----------------------------

_names = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
_texts = st.text(min_size=1, max_size=20).filter(lambda t: t.strip() != "")
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_args = st.dictionaries(st.text(min_size=1, max_size=6), _json, max_size=4)


@st.composite
def conversations(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(_names, min_size=1, max_size=3, unique=True))
    messages: list[dict[str, Any]] = [user(draw(_texts))]
    for turn in range(draw(st.integers(0, 4))):
        calls = [
            call(f"c{turn}_{i}", draw(st.sampled_from(names)), orjson.dumps(draw(_args)).decode())
            for i in range(draw(st.integers(0, 3)))
        ]
        text = draw(st.none() | _texts) if calls else draw(_texts)
        messages.append({"role": "assistant", "content": text, "tool_calls": calls or None})
        for c in calls:
            result = draw(
                _args.map(lambda a: orjson.dumps(a).decode()) | _texts.map("ok: ".__add__)
            )
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        messages.append(user(draw(_texts)))
    tools = [tool(n, {"type": "object", "properties": {"q": {"type": "string"}}}) for n in names]
    return chat(messages=messages, tools=tools)


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_a_conversation_survives_translation(request: dict[str, Any]) -> None:
    body, dropped = chat_request_to_gemini(request)
    assert dropped == []
    messages = request["messages"]
    roles: list[str] = []
    for m in messages:
        role = {"user": "user", "assistant": "model"}.get(m["role"], "tool")
        if role != "tool" or roles[-1] != "tool":
            roles.append(role)
    assert [c["role"] for c in body["contents"]] == [r.replace("tool", "user") for r in roles]

    parts = [p for c in body["contents"] for p in c["parts"]]
    texts = [m["content"] for m in messages if m["role"] != "tool" and m["content"]]
    assert [p["text"] for p in parts if "text" in p] == texts
    calls = [c["function"] for m in messages for c in m.get("tool_calls") or []]
    assert [p["functionCall"] for p in parts if "functionCall" in p] == [
        {"name": c["name"], "args": orjson.loads(c["arguments"])} for c in calls
    ]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert [p["functionResponse"] for p in parts if "functionResponse" in p] == [
        {"name": c["name"], "response": {"result": orjson.loads(r) if r[0] == "{" else r}}
        for c, r in zip(calls, results, strict=True)
    ]
    declared = body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declared] == [t["function"]["name"] for t in request["tools"]]


def test_reasoning_of_geminis_format_goes_back_as_thought_parts_the_rest_is_dropped() -> None:
    google = "google-gemini-v1"
    assistant = {
        "role": "assistant",
        "content": "Answer",
        "reasoning_content": "Let me think",
        "reasoning_details": [
            {"type": "reasoning.text", "text": "Let me think", "signature": "s1", "format": google},
            {"type": "reasoning.encrypted", "data": "s2", "format": google},
            {
                "type": "reasoning.text",
                "text": "x",
                "signature": "a",
                "format": "anthropic-claude-v1",
            },
        ],
    }
    body, dropped = chat_request_to_gemini(chat(user("q"), assistant, user("and?")))
    assert body["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "Let me think", "thought": True, "thoughtSignature": "s1"},
            {"text": "Answer", "thoughtSignature": "s2"},
        ],
    }
    assert dropped == ["reasoning_details"]
    unsigned = {"role": "assistant", "content": "A", "reasoning_content": "hmm"}
    body, dropped = chat_request_to_gemini(chat(user("q"), unsigned, user("and?")))
    assert body["contents"][1] == {"role": "model", "parts": [{"text": "A"}]}
    assert dropped == ["reasoning_content"]


def test_an_answers_thoughts_and_signatures_are_reasoning() -> None:
    answer = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "hmm", "thought": True, "thoughtSignature": "s1"},
                        {"text": "Answer", "thoughtSignature": "s2"},
                    ],
                },
                "finishReason": "STOP",
            }
        ]
    }
    message = gemini_response_to_chat(answer, model="m")["choices"][0]["message"]
    google = "google-gemini-v1"
    assert message["content"] == "Answer"
    assert message["reasoning_content"] == "hmm"
    assert message["reasoning_details"] == [
        {"type": "reasoning.text", "text": "hmm", "signature": "s1", "format": google},
        {"type": "reasoning.encrypted", "data": "s2", "format": google},
    ]

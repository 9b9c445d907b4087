"""A Gemini generateContent request as Chat Completions (protocols/gemini_chat.py), on hand-made
requests and on what Gemini CLI really sends (tests/agents/captured/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmrelay.protocols import gemini_reasoning
from llmrelay.protocols.gemini_chat import gemini_request_to_chat
from llmrelay.protocols.translation import TranslationError

CAPTURED = Path(__file__).resolve().parent.parent / "agents" / "captured"


def chat(payload: dict[str, Any], stream: bool = False) -> tuple[dict[str, Any], list[str]]:
    return gemini_request_to_chat(payload, upstream_model="up", stream=stream)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def test_system_instruction_contents_and_sampling() -> None:
    body, dropped = chat(
        {
            "systemInstruction": {"parts": [{"text": "be brief"}, {"text": "and kind"}]},
            "contents": [user("hi"), {"role": "model", "parts": [{"text": "hello"}]}, user("bye")],
            "generationConfig": {
                "temperature": 0.2,
                "topP": 0.9,
                "topK": 40,
                "maxOutputTokens": 100,
                "stopSequences": ["X"],
                "candidateCount": 2,
                "seed": 7,
                "presencePenalty": 0.1,
            },
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "OFF"}],
        }
    )
    assert body == {
        "model": "up",
        "messages": [
            {"role": "system", "content": "be brief\nand kind"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"},
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 100,
        "stop": ["X"],
        "n": 2,
        "seed": 7,
        "presence_penalty": 0.1,
    }
    assert set(dropped) == {"safetySettings", "generationConfig.topK"}


def test_snake_case_spellings_are_read_too() -> None:
    body, _ = chat(
        {
            "system_instruction": {"parts": [{"text": "sys"}]},
            "contents": [user("hi")],
            "generation_config": {"max_output_tokens": 5},
        }
    )
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert body["max_tokens"] == 5


def test_a_stream_asks_for_the_usage_chunk() -> None:
    body, _ = chat({"contents": [user("hi")]}, stream=True)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_function_calls_and_responses_pair_by_id_or_by_name() -> None:
    tools = [
        {
            "functionDeclarations": [
                {
                    "name": "lookup",
                    "description": "Looks up.",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {"q": {"type": "STRING", "nullable": True}},
                        "required": ["q"],
                    },
                },
                {"name": "now"},
            ]
        },
        {"googleSearch": {}},
        {"codeExecution": {}},
    ]
    body, dropped = chat(
        {
            "contents": [
                user("find it"),
                {
                    "role": "model",
                    "parts": [
                        {"functionCall": {"id": "c-1", "name": "lookup", "args": {"q": "a"}}},
                        {"functionCall": {"name": "now", "args": {}}},
                    ],
                },
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": "now", "response": {"output": "noon"}}},
                        {
                            "functionResponse": {
                                "id": "c-1",
                                "name": "lookup",
                                "response": {"hits": [1, 2]},
                            }
                        },
                        {"text": "and then?"},
                    ],
                },
            ],
            "tools": tools,
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        }
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c-1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q":"a"}'},
            },
            {"id": "call_1_1", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ],
    }
    assert body["messages"][2:] == [
        {"role": "tool", "tool_call_id": "call_1_1", "content": "noon"},
        {"role": "tool", "tool_call_id": "c-1", "content": '{"hits":[1,2]}'},
        {"role": "user", "content": "and then?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Looks up.",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": ["string", "null"]}},
                    "required": ["q"],
                },
            },
        },
        {
            "type": "function",
            "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert body["tool_choice"] == "required"
    assert set(dropped) == {"tools.googleSearch", "tools.codeExecution"}


@pytest.mark.parametrize(
    ("config", "choice"),
    [
        ({"mode": "AUTO"}, "auto"),
        ({"mode": "NONE"}, "none"),
        ({"mode": "VALIDATED"}, "auto"),
        (
            {"mode": "ANY", "allowedFunctionNames": ["f"]},
            {"type": "function", "function": {"name": "f"}},
        ),
        (
            {"mode": "ANY", "allowedFunctionNames": ["f", "g"]},
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [
                        {"type": "function", "function": {"name": "f"}},
                        {"type": "function", "function": {"name": "g"}},
                    ],
                },
            },
        ),
    ],
)
def test_tool_config_as_tool_choice(config: dict[str, Any], choice: Any) -> None:
    body, _ = chat(
        {
            "contents": [user("x")],
            "tools": [{"functionDeclarations": [{"name": "f"}, {"name": "g"}]}],
            "toolConfig": {"functionCallingConfig": config},
        }
    )
    assert body["tool_choice"] == choice


def test_parameters_json_schema_is_taken_as_it_is() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {}}}
    body, _ = chat(
        {
            "contents": [user("x")],
            "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": schema}]}],
        }
    )
    assert body["tools"][0]["function"]["parameters"] == schema


@pytest.mark.parametrize(
    ("thinking", "effort"),
    [
        ({"thinkingBudget": 0}, "none"),
        ({"thinkingBudget": 512}, "low"),
        ({"thinkingBudget": 8192}, "medium"),
        ({"thinkingBudget": 30000}, "high"),
        ({"thinkingBudget": -1}, None),
        ({"thinkingLevel": "HIGH"}, "high"),
        ({"thinkingLevel": "low", "thinkingBudget": 30000}, "low"),
        ({"includeThoughts": True}, None),
    ],
)
def test_thinking_config_as_reasoning_effort(thinking: dict[str, Any], effort: str | None) -> None:
    body, _ = chat({"contents": [user("x")], "generationConfig": {"thinkingConfig": thinking}})
    assert body.get("reasoning_effort") == effort


def test_structured_output_as_response_format() -> None:
    openapi = {
        "type": "OBJECT",
        "properties": {"next": {"type": "STRING", "enum": ["user", "model"], "format": "enum"}},
        "required": ["next"],
        "propertyOrdering": ["next"],
    }
    body, _ = chat(
        {
            "contents": [user("x")],
            "generationConfig": {"responseMimeType": "application/json", "responseSchema": openapi},
        }
    )
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "response",
            "schema": {
                "type": "object",
                "properties": {"next": {"type": "string", "enum": ["user", "model"]}},
                "required": ["next"],
            },
        },
    }
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body, _ = chat(
        {
            "contents": [user("x")],
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseJsonSchema": schema,
            },
        }
    )
    assert body["response_format"]["json_schema"]["schema"] == schema
    body, _ = chat(
        {"contents": [user("x")], "generationConfig": {"responseMimeType": "application/json"}}
    )
    assert body["response_format"] == {"type": "json_object"}


def test_inline_images_audio_and_files() -> None:
    body, _ = chat(
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"text": "look"},
                        {"inlineData": {"mimeType": "image/png", "data": "AAA"}},
                        {"inlineData": {"mimeType": "audio/wav", "data": "BBB"}},
                        {"inlineData": {"mimeType": "application/pdf", "data": "CCC"}},
                        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x/y.jpg"}},
                    ],
                }
            ]
        }
    )
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
        {"type": "input_audio", "input_audio": {"data": "BBB", "format": "wav"}},
        {
            "type": "file",
            "file": {"filename": "file.pdf", "file_data": "data:application/pdf;base64,CCC"},
        },
        {"type": "image_url", "image_url": {"url": "https://x/y.jpg"}},
    ]


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"contents": [user("x")], "cachedContent": "cachedContents/abc"}, "cachedContent"),
        ({"contents": []}, "contents"),
        ({"contents": [{"role": "tool", "parts": []}]}, "contents"),
        (
            {"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "gs://b/x.mp4"}}]}]},
            "contents",
        ),
        (
            {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f"}}]}]},
            "contents",
        ),
        (
            {"contents": [user("x")], "generationConfig": {"responseModalities": ["AUDIO"]}},
            "responseModalities",
        ),
        (
            {"contents": [user("x")], "generationConfig": {"responseMimeType": "text/x.enum"}},
            "responseMimeType",
        ),
    ],
)
def test_what_chat_cannot_carry_is_refused_naming_the_field(
    payload: dict[str, Any], param: str
) -> None:
    with pytest.raises(TranslationError) as refused:
        chat(payload)
    assert refused.value.param == param


def test_thoughts_and_signatures_of_a_gemini_model_turn() -> None:
    body, _ = chat(
        {
            "contents": [
                user("x"),
                {
                    "role": "model",
                    "parts": [
                        {"text": "pondering", "thought": True, "thoughtSignature": "sigA"},
                        {"text": "answer", "thoughtSignature": "sigB"},
                        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "sigC"},
                    ],
                },
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
            ]
        }
    )
    assistant = body["messages"][1]
    assert assistant["content"] == "answer"
    assert assistant["reasoning_content"] == "pondering"
    assert assistant["reasoning_details"] == [
        {
            "type": "reasoning.text",
            "text": "pondering",
            "signature": "sigA",
            "format": "google-gemini-v1",
        },
        {"type": "reasoning.encrypted", "data": "sigB", "format": "google-gemini-v1"},
    ]
    assert assistant["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "sigC"}}


def test_a_packed_signature_gives_back_another_providers_reasoning() -> None:
    details = [
        {
            "type": "reasoning.text",
            "text": "hmm",
            "signature": "anthropic-sig",
            "format": "anthropic-claude-v1",
        }
    ]
    body, _ = chat(
        {
            "contents": [
                user("x"),
                {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {"name": "f", "args": {}},
                            "thoughtSignature": gemini_reasoning.pack(details),
                        }
                    ],
                },
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
            ]
        }
    )
    assistant = body["messages"][1]
    assert assistant["reasoning_details"] == details
    assert assistant["reasoning_content"] == "hmm"
    assert "extra_content" not in assistant["tool_calls"][0]


@pytest.mark.parametrize("task", ["plain", "tool"])
def test_what_gemini_cli_sends_translates(task: str) -> None:
    captured = json.loads((CAPTURED / f"gemini-cli-{task}.json").read_text())
    for exchange in captured["exchanges"]:
        if ":streamGenerateContent" not in exchange["path"]:
            continue
        body, dropped = chat(exchange["body"], stream=True)
        assert body["messages"][0]["role"] == "system"
        assert body["messages"][0]["content"].startswith("You are Gemini CLI")
        names = {t["function"]["name"] for t in body["tools"]}
        assert "run_shell_command" in names
        assert "generationConfig.topK" in dropped
        calls = [m for m in body["messages"] if m.get("tool_calls")]
        results = [m for m in body["messages"] if m["role"] == "tool"]
        assert len(calls) == len(results)
        for call, result in zip(calls, results, strict=True):
            assert result["tool_call_id"] == call["tool_calls"][0]["id"]
            assert "AGENT-captured" in result["content"]


def test_a_repeated_function_response_is_left_out() -> None:
    """What Gemini CLI sends in a resumed session: the turn's function response twice."""
    call = {"functionCall": {"id": "c1", "name": "sh", "args": {}}}
    response = {"functionResponse": {"id": "c1", "name": "sh", "response": {"output": "ok"}}}
    body, dropped = chat(
        {
            "contents": [
                user("run it"),
                {"role": "model", "parts": [call]},
                {"role": "user", "parts": [response, response]},
                user("and?"),
            ]
        }
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "user"]
    assert dropped == ["contents.parts.functionResponse"]

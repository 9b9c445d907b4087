"""Gemini for the scripted agent upstream (`POST /v1beta/models/{model}:generateContent`,
`:streamGenerateContent?alt=sse`, `:countTokens`): `systemInstruction` and `contents` read into
an `agent_script.Conversation` (functionResponse parts are tool results, functionCall parts
tool calls); function declarations with `parameters` or `parametersJsonSchema`; a
`responseSchema` / `responseJsonSchema` (or a JSON mime type alone) asks for structured output.
The answer is a GenerateContentResponse; streamed, one per `data:` event, the last with the
finish reason and usageMetadata (a function call comes whole, in one part, as Gemini sends it).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from tests.support.agent_script import (
    Conversation,
    Decision,
    Reply,
    Role,
    Tool,
    Turn,
    estimate_tokens,
)
from tests.support.agent_wire import pieces, sse_data


def conversation(body: dict[str, Any]) -> Conversation:
    turns: list[Turn] = []
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, dict):
        turns.append(Turn("system", _text(system.get("parts"))))
    for content in body.get("contents") or []:
        role: Role = "assistant" if content.get("role") == "model" else "user"
        parts = content.get("parts") or []
        for part in parts:
            if "functionResponse" in part:
                result = part["functionResponse"].get("response")
                turns.append(Turn("tool_result", orjson.dumps(result).decode()))
            elif "functionCall" in part:
                turns.append(Turn("tool_call", orjson.dumps(part["functionCall"]).decode()))
        text = _text(parts)
        if text:
            turns.append(Turn(role, text))
    tools: list[Tool] = []
    for group in body.get("tools") or []:
        for declaration in group.get("functionDeclarations") or []:
            schema = declaration.get("parametersJsonSchema") or declaration.get("parameters")
            tools.append(Tool(str(declaration["name"]), schema or {}))
    return Conversation(tuple(turns), tuple(tools), _output_schema(body))


def _text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n".join(
        str(p["text"])
        for p in parts
        if isinstance(p, dict) and "text" in p and not p.get("thought")
    )


def _output_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if isinstance(schema, dict):
        return schema
    if config.get("responseMimeType") == "application/json":
        return {"type": "object"}
    return None


def usage(body: bytes, decision: Decision) -> dict[str, Any]:
    prompt = estimate_tokens(body)
    output = estimate_tokens(
        decision.text if isinstance(decision, Reply) else decision.arguments_json
    )
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
    }


def count_tokens(body: bytes) -> dict[str, Any]:
    return {"totalTokens": estimate_tokens(body)}


def _answer(
    model: str, parts: list[dict[str, Any]], finish: str | None, usage: dict[str, Any] | None
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    answer: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:20],
    }
    if usage is not None:
        answer["usageMetadata"] = usage
    return answer


def _parts(decision: Decision) -> list[dict[str, Any]]:
    if isinstance(decision, Reply):
        return [{"text": decision.text}]
    return [{"functionCall": {"name": decision.tool.name, "args": decision.arguments}}]


def response(model: str, decision: Decision, usage: dict[str, Any]) -> dict[str, Any]:
    return _answer(model, _parts(decision), "STOP", usage)


def stream(model: str, decision: Decision, usage: dict[str, Any]) -> list[bytes]:
    if isinstance(decision, Reply):
        texts = pieces(decision.text)
        events = [_answer(model, [{"text": t}], None, None) for t in texts[:-1]]
        events.append(_answer(model, [{"text": texts[-1]}], "STOP", usage))
    else:
        events = [_answer(model, _parts(decision), "STOP", usage)]
    return [sse_data(orjson.dumps(e)) for e in events]


def model_list(names: list[str]) -> dict[str, Any]:
    return {
        "models": [
            {
                "name": f"models/{name}",
                "version": "001",
                "displayName": name,
                "description": "scripted agent upstream",
                "inputTokenLimit": 1048576,
                "outputTokenLimit": 65536,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            }
            for name in names
        ]
    }

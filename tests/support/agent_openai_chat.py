"""OpenAI Chat Completions for the scripted agent upstream (`POST /v1/chat/completions`):
the request read into an `agent_script.Conversation`, the decision written back as a
`chat.completion` or as its stream of `chat.completion.chunk` events (tool-call arguments in
pieces, the usage chunk when `stream_options.include_usage` asks for it, then `[DONE]`)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from tests.support.agent_script import (
    Conversation,
    Decision,
    Reply,
    Tool,
    ToolCall,
    Turn,
    estimate_tokens,
)
from tests.support.agent_wire import pieces, sse_data


def conversation(body: dict[str, Any]) -> Conversation:
    turns: list[Turn] = []
    for message in body.get("messages") or []:
        role = message.get("role")
        text = content_text(message.get("content"))
        if role in ("system", "developer"):
            turns.append(Turn("system", text))
        elif role == "user":
            turns.append(Turn("user", text))
        elif role == "assistant":
            if text:
                turns.append(Turn("assistant", text))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                turns.append(
                    Turn("tool_call", f"{function.get('name')} {function.get('arguments')}")
                )
        elif role in ("tool", "function"):
            turns.append(Turn("tool_result", text))
    tools = tuple(
        Tool(str(t["function"]["name"]), t["function"].get("parameters") or {})
        for t in body.get("tools") or []
        if t.get("type") == "function" and isinstance(t.get("function"), dict)
    )
    return Conversation(tuple(turns), tools, _output_schema(body.get("response_format")))


def content_text(content: Any) -> str:
    """The text of a message's content: a string or a list of parts (`text` parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _output_schema(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    if response_format.get("type") == "json_object":
        return {"type": "object"}
    return None


def usage(body: bytes, decision: Decision) -> dict[str, Any]:
    prompt = estimate_tokens(body)
    completion = estimate_tokens(_output(decision))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _output(decision: Decision) -> str:
    return decision.text if isinstance(decision, Reply) else decision.arguments_json


def completion(model: str, decision: Decision, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if isinstance(decision, Reply):
        message["content"] = decision.text
    else:
        message["tool_calls"] = [_call(decision)]
    return {
        "id": "chatcmpl-agent",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "stop" if isinstance(decision, Reply) else "tool_calls",
            }
        ],
        "usage": usage,
    }


def _call(decision: ToolCall) -> dict[str, Any]:
    function = {"name": decision.tool.name, "arguments": decision.arguments_json}
    return {"id": decision.call_id, "type": "function", "function": function}


def stream(
    model: str, decision: Decision, usage: dict[str, Any], include_usage: bool
) -> list[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            "id": "chatcmpl-agent",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
        }

    events = [chunk({"role": "assistant", "content": ""})]
    if isinstance(decision, Reply):
        events += [chunk({"content": piece}) for piece in pieces(decision.text)]
        events.append(chunk({}, "stop"))
    else:
        head = {**_call(decision), "index": 0}
        head["function"] = {"name": decision.tool.name, "arguments": ""}
        events.append(chunk({"tool_calls": [head]}))
        for piece in pieces(decision.arguments_json):
            events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        events.append(chunk({}, "tool_calls"))
    if include_usage:
        events.append({**chunk({}), "choices": [], "usage": usage})
    return [sse_data(orjson.dumps(e)) for e in events] + [sse_data(b"[DONE]")]

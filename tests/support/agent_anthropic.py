"""Anthropic Messages for the scripted agent upstream (`POST /v1/messages` and
`/v1/messages/count_tokens`): `system` and the messages' content blocks read into an
`agent_script.Conversation` (tool_result blocks are tool results, whatever message holds them);
the decision written back as a Message or as the documented event stream:

    message_start, content_block_start, ping, content_block_delta... (text_delta, or
    input_json_delta for a tool_use block), content_block_stop, message_delta (stop_reason,
    cumulative usage), message_stop

Structured output (`output_config.format` or the older `output_format`, type json_schema)
gets a minimal instance of its schema.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from tests.support.agent_script import (
    Conversation,
    Decision,
    Reply,
    Tool,
    Turn,
    estimate_tokens,
)
from tests.support.agent_wire import pieces, sse_event


def conversation(body: dict[str, Any]) -> Conversation:
    turns: list[Turn] = []
    system = body.get("system")
    if system:
        turns.append(Turn("system", _text(system)))
    for message in body.get("messages") or []:
        role = message.get("role")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        text = _text([b for b in blocks if b.get("type") == "text"])
        for block in blocks:
            if block.get("type") == "tool_result":
                turns.append(Turn("tool_result", _text(block.get("content", ""))))
            elif block.get("type") == "tool_use":
                turns.append(Turn("tool_call", orjson.dumps(block).decode()))
        if text and role in ("user", "assistant"):
            turns.append(Turn(role, text))
    tools = tuple(
        Tool(str(t["name"]), t.get("input_schema") or {})
        for t in body.get("tools") or []
        if "input_schema" in t  # client tools; server tools (web_search_...) have a type
    )
    return Conversation(tuple(turns), tools, _output_schema(body))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _output_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = (body.get("output_config") or {}).get("format") or body.get("output_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    return None


def usage(body: bytes, decision: Decision) -> dict[str, Any]:
    output = decision.text if isinstance(decision, Reply) else decision.arguments_json
    return {
        "input_tokens": estimate_tokens(body),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": estimate_tokens(output),
    }


def count_tokens(body: bytes) -> dict[str, Any]:
    return {"input_tokens": estimate_tokens(body)}


def _block(decision: Decision) -> dict[str, Any]:
    if isinstance(decision, Reply):
        return {"type": "text", "text": decision.text}
    return {
        "type": "tool_use",
        "id": f"toolu_{decision.call_id}",
        "name": decision.tool.name,
        "input": decision.arguments,
    }


def message(model: str, decision: Decision, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [_block(decision)],
        "stop_reason": "end_turn" if isinstance(decision, Reply) else "tool_use",
        "stop_sequence": None,
        "usage": usage,
    }


def stream(model: str, decision: Decision, usage: dict[str, Any]) -> list[bytes]:
    events: list[bytes] = []

    def send(kind: str, **fields: Any) -> None:
        events.append(sse_event(kind, orjson.dumps({"type": kind, **fields})))

    done = message(model, decision, usage)
    started = {**done, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    send("message_start", message=started)
    block = _block(decision)
    if isinstance(decision, Reply):
        send("content_block_start", index=0, content_block={**block, "text": ""})
        send("ping")
        for piece in pieces(decision.text):
            send("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
    else:
        send("content_block_start", index=0, content_block={**block, "input": {}})
        send("ping")
        for piece in pieces(decision.arguments_json):
            delta = {"type": "input_json_delta", "partial_json": piece}
            send("content_block_delta", index=0, delta=delta)
    send("content_block_stop", index=0)
    stop = {"stop_reason": done["stop_reason"], "stop_sequence": None}
    send("message_delta", delta=stop, usage=usage)
    send("message_stop")
    return events

"""OpenAI Responses for the scripted agent upstream (`POST /v1/responses`): the request's
`instructions` and `input` items read into an `agent_script.Conversation`; the decision written
back as a `response` object or as its event stream, in the API's order:

    response.created, response.in_progress,
    text:  response.output_item.added (message), response.content_part.added,
           response.output_text.delta..., response.output_text.done,
           response.content_part.done, response.output_item.done
    call:  response.output_item.added (function_call), response.function_call_arguments.delta...,
           response.function_call_arguments.done, response.output_item.done
    response.completed (the whole response, with usage)

each with its `sequence_number`. A `local_shell` built-in is called with a `local_shell_call`
item and a `custom` (freeform) tool with a `custom_tool_call`, as the API does.
"""

from __future__ import annotations

import itertools
import time
import uuid
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
from tests.support.agent_wire import pieces, sse_event


def conversation(body: dict[str, Any]) -> Conversation:
    turns: list[Turn] = []
    if body.get("instructions"):
        turns.append(Turn("system", str(body["instructions"])))
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given or []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            text = _content_text(item.get("content"))
            if role in ("system", "developer"):
                turns.append(Turn("system", text))
            elif role in ("user", "assistant"):
                turns.append(Turn("user" if role == "user" else "assistant", text))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            turns.append(Turn("tool_call", orjson.dumps(item).decode()))
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            output = item.get("output")
            turns.append(
                Turn("tool_result", output if isinstance(output, str) else _content_text(output))
            )
    tools = tuple(t for t in map(_tool, body.get("tools") or []) if t is not None)
    return Conversation(tuple(turns), tools, _output_schema(body.get("text")))


def _tool(tool: dict[str, Any]) -> Tool | None:
    kind = tool.get("type")
    if kind == "function":
        return Tool(str(tool.get("name")), tool.get("parameters") or {})
    if kind == "local_shell":
        return Tool("local_shell", {}, "local_shell")
    if kind == "custom":
        return Tool(str(tool.get("name")), {}, "custom")
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _output_schema(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    if fmt.get("type") == "json_object":
        return {"type": "object"}
    return None


def usage(body: bytes, decision: Decision) -> dict[str, Any]:
    given = estimate_tokens(body)
    output = estimate_tokens(
        decision.text if isinstance(decision, Reply) else decision.arguments_json
    )
    return {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": given + output,
    }


def output_item(decision: Decision) -> dict[str, Any]:
    """The one output item of the answer, complete."""
    item_id = uuid.uuid4().hex[:24]
    if isinstance(decision, Reply):
        return {
            "type": "message",
            "id": f"msg_{item_id}",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": decision.text, "annotations": [], "logprobs": []}
            ],
        }
    return _call_item(decision, f"fc_{item_id}")


def _call_item(decision: ToolCall, item_id: str) -> dict[str, Any]:
    if decision.tool.kind == "local_shell":
        action = {
            "type": "exec",
            "command": decision.arguments["command"],
            "timeout_ms": None,
            "working_directory": None,
            "env": {},
            "user": None,
        }
        return {
            "type": "local_shell_call",
            "id": item_id,
            "call_id": decision.call_id,
            "status": "completed",
            "action": action,
        }
    if decision.tool.kind == "custom":
        return {
            "type": "custom_tool_call",
            "id": item_id,
            "call_id": decision.call_id,
            "name": decision.tool.name,
            "input": decision.arguments["input"],
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": decision.call_id,
        "name": decision.tool.name,
        "arguments": decision.arguments_json,
        "status": "completed",
    }


def response(
    body: dict[str, Any],
    model: str,
    item: dict[str, Any] | None,
    usage: dict[str, Any] | None,
    status: str = "completed",
) -> dict[str, Any]:
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": [] if item is None else [item],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    }


def stream(
    body: dict[str, Any], model: str, decision: Decision, usage: dict[str, Any]
) -> list[bytes]:
    sequence = itertools.count()
    events: list[bytes] = []

    def send(kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": next(sequence), **fields}
        events.append(sse_event(kind, orjson.dumps(data)))

    done = response(body, model, output_item(decision), usage)
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    send("response.created", response=started)
    send("response.in_progress", response=started)
    item = done["output"][0]
    at = {"item_id": item["id"], "output_index": 0}
    if isinstance(decision, Reply):
        send(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "content": []},
        )
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        send("response.content_part.added", **at, content_index=0, part=part)
        for piece in pieces(decision.text):
            send("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[])
        send("response.output_text.done", **at, content_index=0, text=decision.text, logprobs=[])
        send(
            "response.content_part.done",
            **at,
            content_index=0,
            part={**part, "text": decision.text},
        )
    elif item["type"] == "function_call":
        send(
            "response.output_item.added",
            output_index=0,
            item={**item, "arguments": "", "status": "in_progress"},
        )
        for piece in pieces(item["arguments"]):
            send("response.function_call_arguments.delta", **at, delta=piece)
        send("response.function_call_arguments.done", **at, arguments=item["arguments"])
    elif item["type"] == "custom_tool_call":
        send(
            "response.output_item.added",
            output_index=0,
            item={**item, "input": "", "status": "in_progress"},
        )
        for piece in pieces(item["input"]):
            send("response.custom_tool_call_input.delta", **at, delta=piece)
        send("response.custom_tool_call_input.done", **at, input=item["input"])
    else:  # local_shell_call: no deltas
        send("response.output_item.added", output_index=0, item={**item, "status": "in_progress"})
    send("response.output_item.done", output_index=0, item=item)
    send("response.completed", response=done)
    return events

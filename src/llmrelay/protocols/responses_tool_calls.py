"""The model's tool calls between Chat and the Responses API, both ways: the client's earlier
calls and its outputs for them as Chat tool calls and `tool` messages (`chat_call_of_item`,
`tool_message_of_output`), and a Chat tool call as the item the client declared the tool as
(`responses_item_of_call`: a function_call, with its `namespace` when it has one, a
custom_tool_call, a local_shell_call or an apply_patch_call). What each tool became on the way
in is in `responses_tools`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols.errors import TranslationError
from llmrelay.protocols.responses_tools import (
    APPLY_PATCH,
    LOCAL_SHELL,
    ToolNames,
    flat_name,
)

__all__ = [
    "CALL_ITEMS",
    "OUTPUT_ITEMS",
    "chat_call_of_item",
    "responses_item_of_call",
    "tool_message_of_output",
]

#: Tool call items the client sends back (the model's earlier calls) and their outputs.
CALL_ITEMS: Final = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "apply_patch_call"}
)
OUTPUT_ITEMS: Final = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "apply_patch_call_output",
    }
)


def fail(message: str, param: str = "input") -> TranslationError:
    return TranslationError(message, param=param)


def chat_call_of_item(item: dict[str, Any]) -> dict[str, Any]:
    """A Chat tool call for one of the model's earlier calls (CALL_ITEMS)."""
    kind = item.get("type")
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise fail(f"a {kind} item needs a call_id")
    if kind == "local_shell_call":
        action = item.get("action")
        if not isinstance(action, dict):
            raise fail("a local_shell_call item needs an action")
        given = {k: v for k, v in action.items() if k != "type" and v is not None}
        return _call(call_id, LOCAL_SHELL, _json(given))
    if kind == "apply_patch_call":
        operation = item.get("operation")
        if not isinstance(operation, dict):
            raise fail("an apply_patch_call item needs an operation")
        return _call(call_id, APPLY_PATCH, _json(operation))
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise fail(f"a {kind} item needs a call_id and a name")
    flat = flat_name(item.get("namespace"), name)
    if kind == "custom_tool_call":
        text = item.get("input")
        if not isinstance(text, str):
            raise fail("a custom_tool_call item's input must be a string")
        return _call(call_id, flat, _json({"input": text}))
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise fail("a function_call item's arguments must be a JSON string")
    return _call(call_id, flat, arguments)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        raise fail("a tool call item holds a value JSON cannot carry") from None


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_message_of_output(item: dict[str, Any]) -> dict[str, Any]:
    """A Chat `tool` message for the client's output of an earlier call (OUTPUT_ITEMS)."""
    kind = item.get("type")
    call_id = item.get("call_id")
    if kind == "local_shell_call_output" and not call_id:
        call_id = item.get("id")  # the API's own spelling: the call's id under `id`
    if not isinstance(call_id, str) or not call_id:
        raise fail(f"a {kind} item needs a call_id")
    output = item.get("output")
    if kind == "apply_patch_call_output":
        status = item.get("status")
        text = output if isinstance(output, str) and output else ""
        if status is not None:
            text = f"[{status}] {text}".rstrip()
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    if isinstance(output, str):
        return {"role": "tool", "tool_call_id": call_id, "content": output}
    if not isinstance(output, list):
        raise fail(f"a {kind}'s output must be a string or a list of parts")
    texts: list[dict[str, Any]] = []
    for part in output:
        piece = part.get("text") if isinstance(part, dict) else None
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
            kind = part.get("type") if isinstance(part, dict) else None
            raise fail(f"function outputs of type {kind!r} cannot be sent to this model")
        if not isinstance(piece, str):
            raise fail("a text part needs a string `text`")
        texts.append({"type": "text", "text": piece})
    content: str | list[dict[str, Any]] = ""
    if len(texts) == 1:
        content = texts[0]["text"]
    elif texts:
        content = texts
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# -- the model's calls, as the client's items ---------------------------------------------


def responses_item_of_call(
    item_id: str, call_id: str, name: str, arguments: str, status: str, names: ToolNames
) -> dict[str, Any]:
    """The Responses output item for a Chat tool call: a function_call unless `names` says
    the function stands for a custom tool, a namespaced one, local_shell or apply_patch."""
    meant = names.get(name)
    if meant is None:
        return _function_call(item_id, call_id, name, arguments, status)
    if meant.kind == "custom":
        item: dict[str, Any] = {
            "type": "custom_tool_call",
            "id": "ctc_" + item_id.removeprefix("fc_"),
            "call_id": call_id,
            "name": meant.name,
            "input": _custom_input(arguments),
            "status": status,
        }
    elif meant.kind == LOCAL_SHELL:
        parsed = _object(arguments)
        command = parsed.get("command")
        if isinstance(command, str):
            command = ["bash", "-lc", command]  # a model that wrote one string
        item = {
            "type": "local_shell_call",
            "id": "lsh_" + item_id.removeprefix("fc_"),
            "call_id": call_id,
            "action": {
                "type": "exec",
                "command": command if isinstance(command, list) else [],
                "env": parsed.get("env") if isinstance(parsed.get("env"), dict) else {},
                "timeout_ms": parsed.get("timeout_ms"),
                "user": parsed.get("user"),
                "working_directory": parsed.get("working_directory"),
            },
            "status": status,
        }
    elif meant.kind == APPLY_PATCH:
        parsed = _object(arguments)
        operation = {k: v for k, v in parsed.items() if k in ("type", "path", "diff")}
        item = {
            "type": "apply_patch_call",
            "id": "apc_" + item_id.removeprefix("fc_"),
            "call_id": call_id,
            "operation": operation,
            "status": "in_progress" if status == "in_progress" else "completed",
        }
    else:
        item = _function_call(item_id, call_id, meant.name, arguments, status)
    if meant.namespace is not None:
        item["namespace"] = meant.namespace
    return item


def _function_call(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _object(arguments: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _custom_input(arguments: str) -> str:
    """The `input` the model wrote; if it wrote something else than `{"input": "..."}`, its
    text as it is (the tool gets what the model meant rather than nothing)."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
        return str(parsed["input"])
    return arguments

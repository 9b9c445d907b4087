"""Anthropic Messages turns and tools as Chat Completions (an Anthropic client, a Chat model).

A user turn's tool_result blocks become `tool` messages ahead of the rest of the turn (Chat
wants them straight after the assistant's tool calls); tool input objects become JSON text.
The forward direction, and the conventions shared by both, are in `chat_anthropic_messages`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols.chat_anthropic_messages import Block, fail, note

#: Prefixed to a tool result Anthropic marked `is_error`: Chat has no such flag, and the
#: model should still be told the tool failed.
TOOL_ERROR_PREFIX: Final = "[tool error] "


def anthropic_system_to_chat(system: Any, dropped: list[str]) -> dict[str, Any] | None:
    if system is None or system == "" or system == []:
        return None
    if isinstance(system, str):
        return {"role": "system", "content": system}
    if not isinstance(system, list):
        raise fail("system must be a string or a list of text blocks", "system")
    parts = []
    for block in system:
        if not isinstance(block, dict) or block.get("type") != "text":
            raise fail("system may only hold text blocks", "system")
        parts.append(_text_part(block, dropped))
    return {"role": "system", "content": _collapse(parts)}


def _text_part(block: Block, dropped: list[str]) -> dict[str, Any]:
    text = block.get("text")
    if not isinstance(text, str):
        raise fail("a text block needs a string `text`")
    if block.get("cache_control") is not None:
        note(dropped, "cache_control")
    if block.get("citations"):
        note(dropped, "messages.content.citations")
    return {"type": "text", "text": text}


def _collapse(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text part reads as a plain string, which every OpenAI-compatible server takes."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def anthropic_message_to_chat(message: Any, dropped: list[str]) -> list[dict[str, Any]]:
    """One Anthropic turn is one Chat message, except that each tool_result of a user turn
    is a `tool` message of its own, ahead of the user's other content."""
    if not isinstance(message, dict):
        raise fail("each message must be an object")
    role, content = message.get("role"), message.get("content")
    if role not in ("user", "assistant"):
        raise fail(f"message role must be user or assistant, not {role!r}")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise fail("message content must be a string or a list of blocks")
    if role == "assistant":
        return _assistant_to_chat(content, dropped)
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            tools.append(_tool_message(block, dropped, parts))
        elif kind == "text":
            parts.append(_text_part(block, dropped))
        elif kind == "image":
            parts.append(_image_part(block, dropped))
        else:
            raise fail(f"content blocks of type {kind!r} cannot be sent to this model")
    if parts:
        tools.append({"role": "user", "content": _collapse(parts)})
    return tools


def _image_part(block: Block, dropped: list[str]) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise fail("an image block needs a source")
    if block.get("cache_control") is not None:
        note(dropped, "cache_control")
    kind = source.get("type")
    if kind == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise fail(f"image sources of type {kind!r} cannot be sent to this model")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_message(block: Block, dropped: list[str], images: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool_result as a `tool` message. Its images (a file-reading tool's) cannot be in a
    tool message: they go into `images`, the user message that follows the tool messages."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise fail("a tool_result block needs a tool_use_id")
    if block.get("cache_control") is not None:
        note(dropped, "cache_control")
    content = block.get("content")
    parts: list[dict[str, Any]] = []
    if isinstance(content, str):
        parts.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for inner in content:
            if isinstance(inner, dict) and inner.get("type") == "image":
                images.append(_image_part(inner, dropped))
                continue
            if not isinstance(inner, dict) or inner.get("type") != "text":
                kind = inner.get("type") if isinstance(inner, dict) else None
                raise fail(f"tool_result content of type {kind!r} cannot be sent to this model")
            parts.append(_text_part(inner, dropped))
    elif content is not None:
        raise fail("tool_result content must be a string or a list of blocks")
    if block.get("is_error"):
        if parts:
            parts[0] = {"type": "text", "text": TOOL_ERROR_PREFIX + parts[0]["text"]}
        else:
            parts.append({"type": "text", "text": TOOL_ERROR_PREFIX.strip()})
    result: str | list[dict[str, Any]] = _collapse(parts) if parts else ""
    return {"role": "tool", "tool_call_id": call_id, "content": result}


def _assistant_to_chat(content: list[Any], dropped: list[str]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(_text_part(block, dropped))
        elif kind == "tool_use":
            calls.append(tool_call_from_block(block))
        elif kind in ("thinking", "redacted_thinking"):
            # Earlier turns' reasoning: read by anthropic_reasoning.unpack_turn.
            continue
        else:
            raise fail(f"assistant content blocks of type {kind!r} are not supported")
    if not parts and not calls:
        return []
    message: dict[str, Any] = {"role": "assistant", "content": _collapse(parts) if parts else None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def tool_call_from_block(block: Block) -> dict[str, Any]:
    call_id, name = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise fail("a tool_use block needs an id and a name")
    arguments = block.get("input")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise fail("a tool_use block's input must be an object")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
    }


def anthropic_tools_to_chat(tools: Any, dropped: list[str]) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise fail("tools must be a list", "tools")
    converted: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type", "custom") not in ("custom", None):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise fail(f"tools of type {kind!r} cannot be sent to this model", "tools")
        name = tool.get("name")
        if not isinstance(name, str):
            raise fail("a tool needs a name", "tools")
        function: dict[str, Any] = {"name": name}
        if tool.get("description"):
            function["description"] = tool["description"]
        function["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
        if tool.get("cache_control") is not None:
            note(dropped, "cache_control")
        converted.append({"type": "function", "function": function})
    return converted


def anthropic_tool_choice_to_chat(choice: Any) -> tuple[str | dict[str, Any], bool]:
    """`(tool_choice, parallel_tool_calls)`: Anthropic folds the parallel switch into the
    choice, Chat keeps it beside."""
    if not isinstance(choice, dict):
        raise fail("tool_choice must be an object", "tool_choice")
    kind = choice.get("type")
    parallel = not choice.get("disable_parallel_tool_use")
    simple = {"auto": "auto", "any": "required", "none": "none"}
    if isinstance(kind, str) and kind in simple:
        return simple[kind], parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise fail("tool_choice must be auto, any, none or a named tool", "tool_choice")

"""Chat Completions turns and tools as Anthropic Messages (a Chat client, an Anthropic model).

The two shapes differ in three ways that drive everything here: Anthropic keeps the system
prompt out of the turns, wants strictly alternating user/assistant turns (so Chat's `tool`
messages become `tool_result` blocks of a user turn, placed first as the API requires), and
carries tool input as an object where Chat carries a JSON string. What cannot be carried
raises TranslationError naming the client's field; what is harmless to lose is named in
`dropped` so the gateway can tell the client. The reverse is in `anthropic_chat_messages`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols.chat_anthropic_thinking import thinking_blocks
from llmrelay.protocols.translation import TranslationError

#: Image types Anthropic accepts in a base64 source.
IMAGE_MEDIA_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

Block = dict[str, Any]


def note(dropped: list[str], field: str) -> None:
    if field not in dropped:
        dropped.append(field)


def fail(message: str, param: str = "messages") -> TranslationError:
    return TranslationError(message, param=param)


def chat_messages_to_anthropic(
    messages: Any, dropped: list[str]
) -> tuple[str | list[Block] | None, list[dict[str, Any]]]:
    """`(system, messages)`: system and developer messages are gathered, in order, into the
    top-level system prompt; consecutive turns of one side are merged into one turn."""
    if not isinstance(messages, list) or not messages:
        raise fail("messages must be a non-empty list")
    system: list[Block] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict):
            raise fail("each message must be an object")
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_text_blocks(message.get("content"), str(role)))
            continue
        if role == "user":
            side, blocks = "user", _user_blocks(message.get("content"), dropped)
        elif role == "assistant":
            side, blocks = "assistant", _assistant_blocks(message, dropped)
        elif role == "tool":
            side, blocks = "user", [_tool_result_block(message)]
        elif role == "function":
            raise fail("function messages (the legacy form of tool messages) are not supported")
        else:
            raise fail(f"unknown message role {role!r}")
        if message.get("name") is not None:
            note(dropped, "messages.name")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == side:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": side, "content": blocks})
    if not turns:
        raise fail("messages has no user or assistant content")
    for turn in turns:
        content = turn["content"]
        if turn["role"] == "user":
            # Anthropic rejects text before a tool_result in the same turn.
            content.sort(key=lambda block: block["type"] != "tool_result")
        if len(content) == 1 and _is_plain_text(content[0]):
            turn["content"] = content[0]["text"]
    if not system:
        return None, turns
    if len(system) == 1 and _is_plain_text(system[0]):
        return system[0]["text"], turns
    return system, turns


def _is_plain_text(block: Block) -> bool:
    return block["type"] == "text" and len(block) == 2


def _text_blocks(content: Any, role: str) -> list[Block]:
    """Text of a system, developer or tool message; empty text is left out because Anthropic
    rejects empty text blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise fail(f"{role} message content must be a string or a list of parts")
    blocks: list[Block] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise fail(f"{role} message content may only hold text parts")
        block = _text_block(part)
        if block is not None:
            blocks.append(block)
    return blocks


def _text_block(part: dict[str, Any]) -> Block | None:
    text = part.get("text")
    if not isinstance(text, str):
        raise fail("a text part needs a string `text`")
    if not text:
        return None
    block: Block = {"type": "text", "text": text}
    if part.get("cache_control") is not None:
        # Clients of Anthropic-backed OpenAI gateways mark cache breakpoints this way.
        block["cache_control"] = part["cache_control"]
    return block


def _user_blocks(content: Any, dropped: list[str]) -> list[Block]:
    if content is None or isinstance(content, str):
        return _text_blocks(content, "user")
    if not isinstance(content, list):
        raise fail("user message content must be a string or a list of parts")
    blocks: list[Block] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            block = _text_block(part)
            if block is not None:
                blocks.append(block)
        elif kind == "image_url":
            blocks.append(_image_block(part, dropped))
        else:
            raise fail(f"content parts of type {kind!r} cannot be sent to this model")
    return blocks


def _image_block(part: dict[str, Any], dropped: list[str]) -> Block:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        raise fail("an image_url part needs a string url")
    if isinstance(image, dict) and image.get("detail") not in (None, "auto"):
        note(dropped, "messages.content.image_url.detail")
    block: Block = {"type": "image", "source": image_source(url)}
    if part.get("cache_control") is not None:
        block["cache_control"] = part["cache_control"]
    return block


def image_source(url: str) -> dict[str, Any]:
    """A data: URL becomes a base64 source, an http(s) URL a url source (Anthropic fetches
    it itself)."""
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, *params = header.split(";")
        if not comma or "base64" not in params:
            raise fail("image data URLs must be base64-encoded")
        if media_type not in IMAGE_MEDIA_TYPES:
            raise fail(f"image type {media_type!r} is not supported (jpeg, png, gif, webp)")
        return {"type": "base64", "media_type": media_type, "data": data}
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    raise fail("image URLs must be data: or http(s): URLs")


def _assistant_blocks(message: dict[str, Any], dropped: list[str]) -> list[Block]:
    if message.get("function_call") is not None:
        raise fail("assistant function_call (the legacy form of tool_calls) is not supported")
    if message.get("audio") is not None:
        raise fail("assistant audio cannot be sent to this model")
    content = message.get("content")
    # The turn's thinking, with its signatures, leads it (chat_anthropic_thinking.py).
    blocks: list[Block] = thinking_blocks(message.get("reasoning_details"), dropped)
    if isinstance(content, list):
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                block = _text_block(part)
            elif kind == "refusal":
                block = _text_block({"text": part.get("refusal")})
            else:
                raise fail(f"assistant content parts of type {kind!r} are not supported")
            if block is not None:
                blocks.append(block)
    else:
        blocks.extend(_text_blocks(content, "assistant"))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        blocks.append({"type": "text", "text": refusal})
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise fail("tool_calls must be a list")
    blocks.extend(_tool_use_block(call) for call in tool_calls)
    return blocks


def _tool_use_block(call: Any) -> Block:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise fail("only function tool calls are supported")
    function = call.get("function")
    call_id = call.get("id")
    if not isinstance(function, dict) or not isinstance(call_id, str):
        raise fail("a tool call needs an id and a function")
    name = function.get("name")
    if not isinstance(name, str):
        raise fail("a tool call needs a function name")
    return {
        "type": "tool_use",
        "id": call_id,
        "name": name,
        "input": parse_arguments(function.get("arguments"), param="messages"),
    }


def parse_arguments(arguments: Any, *, param: str | None) -> dict[str, Any]:
    """Anthropic tool input must be an object; Chat sends it as JSON text (empty text is how
    some clients write a call without arguments)."""
    if arguments is None or arguments == "":
        return {}
    if not isinstance(arguments, str):
        raise TranslationError("tool call arguments must be a JSON string", param=param)
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        raise TranslationError("tool call arguments are not valid JSON", param=param) from None
    if not isinstance(parsed, dict):
        raise TranslationError("tool call arguments must be a JSON object", param=param)
    return parsed


def _tool_result_block(message: dict[str, Any]) -> Block:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str):
        raise fail("a tool message needs a tool_call_id")
    block: Block = {"type": "tool_result", "tool_use_id": call_id}
    content = message.get("content")
    if isinstance(content, str):
        if content:
            block["content"] = content
    else:
        texts = _text_blocks(content, "tool")
        if texts:
            block["content"] = texts
    return block


def chat_tools_to_anthropic(tools: Any, dropped: list[str]) -> list[Block]:
    if not isinstance(tools, list):
        raise fail("tools must be a list", "tools")
    converted: list[Block] = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise fail("only function tools can be sent to this model", "tools")
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str):
            raise fail("a function tool needs a name", "tools")
        anthropic_tool: Block = {"name": name}
        if function.get("description"):
            anthropic_tool["description"] = function["description"]
        # Anthropic requires a schema; Chat lets a function without parameters omit it.
        anthropic_tool["input_schema"] = function.get("parameters") or {
            "type": "object",
            "properties": {},
        }
        if function.get("strict"):
            note(dropped, "tools.function.strict")
        converted.append(anthropic_tool)
    return converted


def chat_tool_choice_to_anthropic(choice: Any) -> Block:
    simple = {"auto": "auto", "required": "any", "none": "none"}
    if isinstance(choice, str) and choice in simple:
        return {"type": simple[choice]}
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str):
            return {"type": "tool", "name": name}
    raise fail("tool_choice must be auto, required, none or a named function", "tool_choice")

"""Responses API input items and tools as Chat Completions messages and tools.

A Responses conversation is a flat list of items: messages, the model's function calls and
the client's function outputs, reasoning. Chat nests the same things differently: function
calls are `tool_calls` of an assistant message, outputs are `tool` messages, and there is no
place for reasoning. What cannot be carried raises TranslationError naming the client's
field; what is harmless to lose is named in `dropped`. The top-level request is translated
in `responses_chat`.
"""

from __future__ import annotations

from typing import Any

from llmrelay.protocols.translation import TranslationError

Item = dict[str, Any]

#: Chat's image detail levels; Responses adds "original", which Chat cannot ask for.
IMAGE_DETAILS = frozenset({"auto", "low", "high"})
#: Chat's simple tool_choice values, spelled the same in both protocols.
TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})
#: Keys of a Responses function tool that have a Chat counterpart.
_FUNCTION_TOOL_KEYS = frozenset({"type", "name", "description", "parameters", "strict"})


def note(dropped: list[str], field: str) -> None:
    if field not in dropped:
        dropped.append(field)


def fail(message: str, param: str = "input") -> TranslationError:
    return TranslationError(message, param=param)


def responses_input_to_chat(
    items: Any, instructions: Any, dropped: list[str]
) -> list[dict[str, Any]]:
    """`instructions` lead as a system message, then the input: a string is one user message,
    a list is read item by item."""
    messages: list[dict[str, Any]] = []
    if instructions is not None and instructions != "":
        if not isinstance(instructions, str):
            raise fail("instructions must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list):
        for item in items:
            _append_item(messages, item, dropped)
    elif items is not None:
        raise fail("input must be a string or a list of items")
    if not messages:
        raise fail("input must be a non-empty string or list of items")
    return messages


def _append_item(messages: list[dict[str, Any]], item: Any, dropped: list[str]) -> None:
    if not isinstance(item, dict):
        raise fail("each input item must be an object")
    kind = item.get("type")
    if kind == "message" or (kind is None and "role" in item):
        message = _message(item, dropped)
        if message is not None:
            messages.append(message)
    elif kind == "function_call":
        call = _tool_call(item)
        last = messages[-1] if messages else None
        # A turn's text and its calls are one Chat message; the calls come after the text.
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append(_tool_message(item))
    elif kind == "reasoning":
        # Earlier turns' reasoning: only the model that wrote it can read it back.
        note(dropped, "input.reasoning")
    elif kind == "item_reference":
        raise fail(
            "item_reference needs items stored by the server, which this model's provider "
            "does not keep; send the items themselves"
        )
    else:
        raise fail(f"input items of type {kind!r} cannot be sent to this model")


def _message(item: Item, dropped: list[str]) -> dict[str, Any] | None:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise fail(f"message role must be user, assistant, system or developer, not {role!r}")
    if item.get("phase") is not None:
        note(dropped, "input.phase")
    content = item.get("content")
    if role == "assistant":
        return {"role": "assistant", "content": _assistant_text(content)}
    # Developer messages are system messages to a Chat model: many OpenAI-compatible
    # servers reject the `developer` role, and OpenAI treats the two alike.
    chat_role = "user" if role == "user" else "system"
    if isinstance(content, str):
        return {"role": chat_role, "content": content}
    if not isinstance(content, list):
        raise fail("message content must be a string or a list of parts")
    parts = [_part(part, dropped) for part in content]
    if chat_role == "system" and any(part["type"] != "text" for part in parts):
        raise fail(f"{role} messages may only hold text")
    return {"role": chat_role, "content": _collapse(parts)}


def _collapse(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text part reads as a plain string, which every OpenAI-compatible server takes."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _text_of(part: Any) -> str | None:
    """The text of a text-like part, or None if the part is something else."""
    if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
        return None
    text = part.get("text")
    if not isinstance(text, str):
        raise fail("a text part needs a string `text`")
    return text


def _assistant_text(content: Any) -> str:
    """An earlier answer as one string: Chat servers differ in what else they take for an
    assistant turn, and the parts were one stream of text when the model wrote them."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise fail("message content must be a string or a list of parts")
    texts: list[str] = []
    for part in content:
        text = _text_of(part)
        if text is None and isinstance(part, dict) and part.get("type") == "refusal":
            text = part.get("refusal")
        if not isinstance(text, str):
            kind = part.get("type") if isinstance(part, dict) else None
            raise fail(f"assistant content parts of type {kind!r} cannot be sent to this model")
        texts.append(text)
    return "".join(texts)


def _part(part: Any, dropped: list[str]) -> dict[str, Any]:
    text = _text_of(part)
    if text is not None:
        return {"type": "text", "text": text}
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "input_image":
        return _image_part(part, dropped)
    if kind == "input_file":
        return _file_part(part)
    raise fail(f"content parts of type {kind!r} cannot be sent to this model")


def _image_part(part: Item, dropped: list[str]) -> dict[str, Any]:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        if part.get("file_id") is not None:
            raise fail("images given by file_id cannot be sent to this model; use image_url")
        raise fail("an input_image part needs an image_url")
    image: dict[str, Any] = {"url": url}
    detail = part.get("detail")
    if detail in IMAGE_DETAILS:
        image["detail"] = detail
    elif detail is not None:
        note(dropped, "input.content.detail")
    return {"type": "image_url", "image_url": image}


def _file_part(part: Item) -> dict[str, Any]:
    data = part.get("file_data")
    if not isinstance(data, str) or not data:
        # file_id names OpenAI's file storage, file_url a fetch the provider will not make.
        raise fail("files can only be sent to this model inline, as file_data")
    file: dict[str, Any] = {"file_data": data}
    if isinstance(part.get("filename"), str):
        file["filename"] = part["filename"]
    return {"type": "file", "file": file}


def _tool_call(item: Item) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
        raise fail("a function_call item needs a call_id and a name")
    if not isinstance(arguments, str):
        raise fail("a function_call item's arguments must be a JSON string")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_message(item: Item) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise fail("a function_call_output item needs a call_id")
    if isinstance(output, str):
        return {"role": "tool", "tool_call_id": call_id, "content": output}
    if not isinstance(output, list):
        raise fail("a function_call_output's output must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for part in output:
        text = _text_of(part)
        if text is None:
            kind = part.get("type") if isinstance(part, dict) else None
            raise fail(f"function outputs of type {kind!r} cannot be sent to this model")
        parts.append({"type": "text", "text": text})
    content: str | list[dict[str, Any]] = _collapse(parts) if parts else ""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def responses_tools_to_chat(tools: Any, dropped: list[str]) -> list[dict[str, Any]]:
    """Function tools only: built-in tools (web search, file search, code interpreter, MCP
    and the rest) run inside OpenAI, and a Chat provider has none of them."""
    if not isinstance(tools, list):
        raise fail("tools must be a list", "tools")
    converted: list[dict[str, Any]] = []
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or kind != "function":
            raise fail(f"tools of type {kind!r} cannot be sent to this model", "tools")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise fail("a function tool needs a name", "tools")
        function: dict[str, Any] = {"name": name}
        for key in ("description", "parameters", "strict"):
            # Responses defaults `strict` to true; a Chat provider may not know strict mode
            # at all, so it is only sent when the client set it.
            if tool.get(key) is not None:
                function[key] = tool[key]
        for key, value in tool.items():
            if key not in _FUNCTION_TOOL_KEYS and value is not None:
                note(dropped, f"tools.{key}")
        converted.append({"type": "function", "function": function})
    return converted


def responses_tool_choice_to_chat(choice: Any) -> str | dict[str, Any]:
    if isinstance(choice, str) and choice in TOOL_CHOICE_MODES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        if isinstance(name, str) and name:
            return {"type": "function", "function": {"name": name}}
    raise fail("tool_choice must be auto, none, required or a named function", "tool_choice")

"""Responses API input items as Chat Completions messages.

A Responses conversation is a flat list of items: messages, the model's tool calls (function,
custom, local shell, apply patch) and the client's outputs for them, reasoning. Chat nests the
same things differently: calls are `tool_calls` of an assistant message, outputs are `tool`
messages, and reasoning rides on the assistant message as the hub's `reasoning_details` (a
reasoning item llmrelay wrote: responses_reasoning.py). Tools and calls are translated in
`responses_tools`. What cannot be carried raises TranslationError naming the client's field;
what is harmless to lose is named in `dropped`. The top-level request is translated in
`responses_chat`.
"""

from __future__ import annotations

from typing import Any

from llmrelay.protocols import responses_reasoning
from llmrelay.protocols.errors import TranslationError
from llmrelay.protocols.responses_tool_calls import (
    CALL_ITEMS,
    OUTPUT_ITEMS,
    chat_call_of_item,
    tool_message_of_output,
)

Item = dict[str, Any]

#: Chat's image detail levels; Responses adds "original", which Chat cannot ask for.
IMAGE_DETAILS = frozenset({"auto", "low", "high"})
#: Items of OpenAI's built-in tools a provider reached through chat never ran: their results
#: are not in them, so leaving them out loses nothing the model could read.
_BUILTIN_CALLS = frozenset({"web_search_call", "file_search_call", "tool_search_call"})


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
        reading = _Reading(messages, dropped)
        for item in items:
            reading.item(item)
        reading.end()
    elif items is not None:
        raise fail("input must be a string or a list of items")
    if not messages:
        raise fail("input must be a non-empty string or list of items")
    return messages


class _Reading:
    """The input items read in order. A reasoning item belongs to the assistant turn it
    precedes (or, written after it, the one it follows); the tool call extra content it holds
    goes onto the calls it names, wherever they are."""

    __slots__ = ("calls", "dropped", "extras", "messages", "pending")

    def __init__(self, messages: list[dict[str, Any]], dropped: list[str]) -> None:
        self.messages = messages
        self.dropped = dropped
        self.pending: list[dict[str, Any]] = []  # details for the next assistant message
        self.calls: dict[str, dict[str, Any]] = {}  # call id -> its Chat tool call
        self.extras: dict[str, Any] = {}  # call id -> extra_content from reasoning items

    def item(self, item: Any) -> None:
        if not isinstance(item, dict):
            raise fail("each input item must be an object")
        kind = item.get("type")
        if kind is not None and not isinstance(kind, str):
            raise fail("an input item's type must be a string")
        messages = self.messages
        if kind == "message" or (kind is None and "role" in item):
            message = _message(item, self.dropped)
            if message is not None:
                messages.append(message)
                if message["role"] == "assistant":
                    self._attach(message)
        elif kind in CALL_ITEMS:
            call = chat_call_of_item(item)
            self.calls[call["id"]] = call
            last = messages[-1] if messages else None
            # A turn's text and its calls are one Chat message; the calls come after the text.
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                messages.append(message)
                self._attach(message)
        elif kind in OUTPUT_ITEMS:
            messages.append(tool_message_of_output(item))
        elif kind == "reasoning":
            self._reasoning(item)
        elif kind in _BUILTIN_CALLS:
            note(self.dropped, f"input.{kind}")
        elif kind == "item_reference":
            raise fail(
                "item_reference needs items stored by the server, which this model's provider "
                "does not keep; send the items themselves"
            )
        else:
            raise fail(f"input items of type {kind!r} cannot be sent to this model")

    def _reasoning(self, item: Item) -> None:
        packed = responses_reasoning.unpack(item.get("encrypted_content"))
        if packed is None:
            # OpenAI's own encrypted reasoning, or a summary alone: only the model that
            # wrote it can read it back.
            note(self.dropped, "input.reasoning")
            return
        self.extras.update(packed.calls)
        if not packed.details:
            return
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("reasoning_details", []).extend(packed.details)
        else:
            self.pending.extend(packed.details)

    def _attach(self, message: dict[str, Any]) -> None:
        if self.pending:
            message["reasoning_details"] = self.pending
            self.pending = []

    def end(self) -> None:
        for call_id, extra in self.extras.items():
            call = self.calls.get(call_id)
            if call is not None:
                call["extra_content"] = extra


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

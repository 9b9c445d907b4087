"""Where the text is, per client protocol: the walkers that hand each text value of a body
to a Screening.

Screened in a request: Chat Completions `messages[].content` (a string, or its `text`
parts), tool results included (a `tool` message's content); Responses `instructions` and
`input` (a string, or its items' text content, and `function_call_output` outputs);
Messages `system` (a string or text blocks) and each message's text blocks and
`tool_result` contents; llmrelay's generate `system`, `prompt` and `messages`; Embeddings
`input` strings; Gemini `systemInstruction` and `contents` text parts (thoughts not: their
signatures cover them), embedContent's content. In an answer:
chat `choices[].message.content`, Messages `content[]` text blocks, Responses `output[]`
message text (and `output_text`), Gemini's candidates' text parts.

Never screened, never changed: names, roles, ids, tool definitions and their schemas, the
tool calls a model made (function names and argument JSON: a rewritten argument would run a
different call), thinking blocks (their signatures cover them), images, audio and files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from llmrelay.guardrails.screen import Path, Screening

Walker = Callable[[dict[str, Any], Screening], None]

#: The types of text parts and blocks across the protocols.
_TEXT_PARTS: Final = frozenset({"text", "input_text", "output_text"})


def _parts(holder: dict[str, Any], key: str, path: Path, screen: Screening) -> None:
    """`holder[key]` when it is a string, or the `text` of each text part of its list."""
    value = holder.get(key)
    if isinstance(value, str):
        screen.text(holder, key, (*path, key))
    elif isinstance(value, list):
        for index, part in enumerate(value):
            if (
                isinstance(part, dict)
                and part.get("type") in _TEXT_PARTS
                and isinstance(part.get("text"), str)
            ):
                screen.text(part, "text", (*path, key, index, "text"))


def _chat_request(body: dict[str, Any], screen: Screening) -> None:
    messages = body.get("messages")
    if isinstance(messages, list):
        for index, message in enumerate(messages):
            if isinstance(message, dict):
                _parts(message, "content", ("messages", index), screen)


def _messages_request(body: dict[str, Any], screen: Screening) -> None:
    _parts(body, "system", (), screen)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            screen.text(message, "content", ("messages", index, "content"))
            continue
        if not isinstance(content, list):
            continue
        for position, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            where = ("messages", index, "content", position)
            if kind == "text" and isinstance(block.get("text"), str):
                screen.text(block, "text", (*where, "text"))
            elif kind == "tool_result":
                _parts(block, "content", where, screen)


def _responses_request(body: dict[str, Any], screen: Screening) -> None:
    if isinstance(body.get("instructions"), str):
        screen.text(body, "instructions", ("instructions",))
    given = body.get("input")
    if isinstance(given, str):
        screen.text(body, "input", ("input",))
        return
    if not isinstance(given, list):
        return
    for index, item in enumerate(given):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind is None or kind == "message":
            _parts(item, "content", ("input", index), screen)
        elif kind == "function_call_output":
            _parts(item, "output", ("input", index), screen)


def _generate_request(body: dict[str, Any], screen: Screening) -> None:
    """`POST /v1/generate` as submitted (a queued one is screened, and stored, in this
    shape; a served one is screened as the chat request it becomes)."""
    for key in ("system", "prompt"):
        if isinstance(body.get(key), str):
            screen.text(body, key, (key,))
    _chat_request(body, screen)


def _embeddings_request(body: dict[str, Any], screen: Screening) -> None:
    given = body.get("input")
    if isinstance(given, str):
        screen.text(body, "input", ("input",))
    elif isinstance(given, list):
        for index, item in enumerate(given):
            if isinstance(item, str):
                screen.text(given, index, ("input", index))


def _gemini_parts(content: Any, path: Path, screen: Screening) -> None:
    """The text parts of a Gemini Content (thought summaries left alone)."""
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return
    for index, part in enumerate(parts):
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought"):
            screen.text(part, "text", (*path, "parts", index, "text"))


def _gemini_request(body: dict[str, Any], screen: Screening) -> None:
    inner = body.get("generateContentRequest")
    if isinstance(inner, dict):  # countTokens' other form
        body = inner
    for key in ("systemInstruction", "system_instruction"):
        _gemini_parts(body.get(key), (key,), screen)
    contents = body.get("contents")
    if isinstance(contents, list):
        for index, content in enumerate(contents):
            _gemini_parts(content, ("contents", index), screen)


def _gemini_embed_request(body: dict[str, Any], screen: Screening) -> None:
    _gemini_parts(body.get("content"), ("content",), screen)
    requests = body.get("requests")
    if isinstance(requests, list):
        for index, request in enumerate(requests):
            if isinstance(request, dict):
                _gemini_parts(request.get("content"), ("requests", index, "content"), screen)


def _gemini_answer(body: dict[str, Any], screen: Screening) -> None:
    candidates = body.get("candidates")
    if isinstance(candidates, list):
        for index, candidate in enumerate(candidates):
            if isinstance(candidate, dict):
                _gemini_parts(candidate.get("content"), ("candidates", index, "content"), screen)


def _chat_answer(body: dict[str, Any], screen: Screening) -> None:
    choices = body.get("choices")
    if not isinstance(choices, list):
        return
    for index, choice in enumerate(choices):
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            _parts(message, "content", ("choices", index, "message"), screen)


def _messages_answer(body: dict[str, Any], screen: Screening) -> None:
    content = body.get("content")
    if isinstance(content, list):
        for index, block in enumerate(content):
            if (
                isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            ):
                screen.text(block, "text", ("content", index, "text"))


def _responses_answer(body: dict[str, Any], screen: Screening) -> None:
    output = body.get("output")
    if isinstance(output, list):
        for index, item in enumerate(output):
            if isinstance(item, dict) and item.get("type") == "message":
                _parts(item, "content", ("output", index), screen)
    if isinstance(body.get("output_text"), str):
        screen.text(body, "output_text", ("output_text",))


def _images_request(body: dict[str, Any], screen: Screening) -> None:
    if isinstance(body.get("prompt"), str):
        screen.text(body, "prompt", ("prompt",))


#: Client operation (the values of providers.base.Operation) -> how its request is walked.
REQUEST_WALKERS: Final[dict[str, Walker]] = {
    "chat": _chat_request,
    "images": _images_request,
    "embeddings": _embeddings_request,
    "messages": _messages_request,
    "count_tokens": _messages_request,
    "responses": _responses_request,
    "responses_compact": _responses_request,
    "generate": _generate_request,
    "gemini_generate": _gemini_request,
    "gemini_stream": _gemini_request,
    "gemini_count_tokens": _gemini_request,
    "gemini_embed": _gemini_embed_request,
    "gemini_batch_embed": _gemini_embed_request,
}
#: ... and its non-streamed answer (embeddings and token counts hold no text).
ANSWER_WALKERS: Final[dict[str, Walker]] = {
    "chat": _chat_answer,
    "messages": _messages_answer,
    "responses": _responses_answer,
    "gemini_generate": _gemini_answer,
}

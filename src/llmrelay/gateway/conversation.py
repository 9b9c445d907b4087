"""Which conversation a request belongs to, for sticky routing (routing/affinity.py).

A provider's prompt cache only helps when every turn of a conversation reaches the same
provider; a model with several routes would otherwise spread the turns. A conversation is
named, first found first:

1. by a session header: `x-llmrelay-session-id`, or the one a coding agent sends on every turn
   (`SESSION_HEADERS`: Claude Code's `x-claude-code-session-id`, Codex's `session-id` (older
   releases `session_id` / `conversation_id`), opencode's `x-session-affinity`);
2. by the request's `prompt_cache_key` (Codex, the OpenAI SDKs), the client's own cache key;
3. by the key that calls and a digest of the prompt's first turn: the system prompt, the tools'
   names and the first user message, which every later turn repeats unchanged (not the whole
   growing history, nor the tools' schemas: a third of an agent's 50 kB that names nothing
   the names do not). Anthropic's `cache_control` marks are left out of the digest: clients
   move them along the history from turn to turn.

Only a model that sticks (ModelSnap.sticky: affinity on, several routes) asks, so a model with
one route never pays for the digest; the digest reads only the first turn, never the history.
"""

from __future__ import annotations

from hashlib import sha256
from typing import Any, Final

import orjson

#: Session headers, the strongest first (an explicit `x-llmrelay-session-id` wins).
SESSION_HEADERS: Final[dict[bytes, int]] = {
    b"x-llmrelay-session-id": 0,
    b"x-claude-code-session-id": 1,
    b"session-id": 2,  # Codex CLI 0.171
    b"session_id": 3,  # Codex CLI before
    b"conversation_id": 4,  # Codex CLI before
    b"x-session-affinity": 5,  # opencode
    b"x-session-id": 6,  # opencode
}

#: The session of a Responses request continuing `previous_response_id` (the provider that
#: gave out that id holds the conversation: it is kept there even when affinity is off).
RESPONSE_SESSION_PREFIX: Final = "response:"


def response_session(response_id: str) -> str:
    """The session key of a conversation continued by `previous_response_id`."""
    return RESPONSE_SESSION_PREFIX + response_id


def conversation_of(
    operation: str, payload: dict[str, Any], session_id: str | None, key_id: str | None
) -> str | None:
    """The conversation a request belongs to (see the module's docstring), as a short key;
    None for an operation that is no conversation (embeddings, token counts: each request
    takes the strategy's own draw)."""
    if operation not in _HEADS:
        return None
    if session_id is not None:
        return "s:" + session_id
    cache_key = payload.get("prompt_cache_key")
    if type(cache_key) is str and cache_key:
        return "c:" + cache_key[:200]
    return f"p:{key_id or ''}:{prefix_digest(operation, payload)}"


def prefix_digest(operation: str, payload: dict[str, Any]) -> str:
    """A digest of the prompt's first turn: system prompt, tools, first user message."""
    head = _HEADS.get(operation, _chat_head)(payload)
    try:
        data = orjson.dumps(head)
    except TypeError:  # not JSON (a payload built in process): its text form
        data = repr(head).encode()
    return sha256(data).hexdigest()[:24]  # (SHA-256: hardware-assisted, faster than BLAKE2)


def _chat_head(payload: dict[str, Any]) -> list[Any]:
    return [_tool_names(payload.get("tools")), _first_turn(payload.get("messages"))]


def _messages_head(payload: dict[str, Any]) -> list[Any]:
    return [
        _unmarked(payload.get("system")),
        _tool_names(payload.get("tools")),
        _first_turn(payload.get("messages")),
    ]


def _responses_head(payload: dict[str, Any]) -> list[Any]:
    given = payload.get("input")
    first = given if isinstance(given, str) else _first_turn(given)
    return [payload.get("instructions"), _tool_names(payload.get("tools")), first]


def _gemini_head(payload: dict[str, Any]) -> list[Any]:
    contents = payload.get("contents")
    first = contents[:1] if isinstance(contents, list) else None
    tools = payload.get("tools")
    names: list[Any] = []
    if isinstance(tools, list):
        for tool in tools:
            declared = tool.get("functionDeclarations") if isinstance(tool, dict) else None
            names.append(_tool_names(declared) if isinstance(declared, list) else tool)
    return [payload.get("systemInstruction"), names, first]


def _tool_names(tools: Any) -> list[Any] | None:
    """Each tool's name (a function's, in chat's shape), or the tool itself when it has none."""
    if not isinstance(tools, list):
        return None
    names: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            names.append(name if isinstance(name, str) else tool)
        else:
            names.append(tool)
    return names


def _first_turn(messages: Any) -> list[Any] | None:
    """The messages (or Responses items) up to and including the first user message, with
    their cache marks left out."""
    if not isinstance(messages, list):
        return None
    head: list[Any] = []
    for message in messages:
        if isinstance(message, dict):
            head.append({**message, "content": _unmarked(message.get("content"))})
            if message.get("role") == "user":
                break
        else:
            head.append(message)
    return head


def _unmarked(content: Any) -> Any:
    """Content blocks without their `cache_control` marks (a string stays as it is)."""
    if not isinstance(content, list):
        return content
    return [
        {k: v for k, v in block.items() if k != "cache_control"}
        if isinstance(block, dict) and "cache_control" in block
        else block
        for block in content
    ]


_HEADS: Final = {
    "chat": _chat_head,
    "messages": _messages_head,
    "responses": _responses_head,
    "gemini_generate": _gemini_head,
    "gemini_stream": _gemini_head,
}

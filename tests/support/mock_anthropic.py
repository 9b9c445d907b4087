"""The Anthropic Messages API on the mock upstream, so a gateway's `anthropic` adapter is
tested against the real wire format (docs.claude.com: Messages, Streaming Messages, Errors).

Base URL: the host root (`MockUpstream.root_url`); the routes are `POST /v1/messages` and
`POST /v1/messages/count_tokens`. Like the API, a request needs a key, in `x-api-key` or as
`Authorization: Bearer` (what the official SDK sends; else 401 authentication_error), and
`anthropic-version` (else 400 invalid_request_error); every answer carries a `request-id`
header, and every error body is `{"type": "error", "error": {"type", "message"}, "request_id"}`
with the type the API uses for that status.

The model name picks the behaviour, as on the OpenAI side (`mock_upstream._behaviour`):
echo, status-CODE, slow-MS, fail-first-N (529 overloaded_error, Anthropic's "try again"),
throttle-first-N (429 with `retry-after: 1`), drop-after-N (cut the stream after N text
deltas), and `overloaded-midstream` (an `event: error` overloaded_error after the first delta,
which is how the API reports an overload once a stream has begun).

The mock model echoes the text of the last user turn (after a final assistant turn, a
prefill, only the rest of it: the answer continues the prefill; a prefill ending in whitespace
is refused with 400, as the API refuses it); when the request has `tools` and that
text starts with "call:", it calls the first tool with `{"query": <the rest>}`; when the last
user turn holds a `tool_result`, it answers "result: <its text>". Answers longer than
`max_tokens` words are cut there (stop_reason "max_tokens"). Tokens are words:
input_tokens + cache_read_input_tokens + cache_creation_input_tokens is the number of words in
the request's text (input_tokens, as in the API, counts only the uncached rest). A request
whose system or message blocks carry `cache_control` uses a prompt cache as the API does: the
text up to the last marked block is read from the cache when an earlier request wrote that
prefix (or the longest earlier marked prefix that was written, the rest being written), and
written to it otherwise (`prompt_cache` keeps the prefixes, per server). A request without
marks but with a top-level `system` reads 3 words from the cache, so tests can check how a
gateway fills its cache buckets either way.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tests.support.mock_upstream import MockUpstream, _behaviour, _dumps

#: The error type the API uses per HTTP status (other 4xx: invalid_request_error; 5xx: api_error).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
#: Tokens a request with a top-level `system` reads from the prompt cache.
CACHED_SYSTEM_TOKENS = 3


def reported_model(model: str) -> str:
    """The dated snapshot the API names in its answers (`claude-x` -> `claude-x-20250101`)."""
    return f"{model}-20250101"


@dataclass(frozen=True)
class Answer:
    """What the mock model says: `text`, or a call of `tool` (`{"id", "name", "input"}`)."""

    text: str
    tool: dict[str, Any] | None
    stop_reason: str

    @property
    def output_tokens(self) -> int:
        text = self.text if self.tool is None else orjson.dumps(self.tool["input"]).decode()
        return len(text.split())


class AnthropicMessages:
    """The two routes; requests are recorded and shared failures decided by `server`."""

    def __init__(self, server: MockUpstream) -> None:
        self.server = server
        #: Digests of the prompt prefixes written to the cache (requests with cache_control).
        self.prompt_cache: set[bytes] = set()

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._receive(request)
        model = str(body.get("model", ""))
        refused: web.StreamResponse | None = _refusal(request)
        if refused is None:
            refused = await self.server._admit(request, model, _error, overloaded=529)
        if refused is not None:
            return refused
        prefill = _prefill(body)
        if prefill is not None and prefill != prefill.rstrip():
            message = "final assistant content cannot end with trailing whitespace"
            return _error(400, message=message)
        answer = _answer(body)
        if prefill is not None and answer.tool is None:  # the answer goes on after the prefill
            rest = answer.text[len(prefill) :] if answer.text.startswith(prefill) else answer.text
            answer = Answer(rest, None, answer.stop_reason)
        prompt = _prompt_usage(body, self.prompt_cache)
        if not body.get("stream"):
            return _json_response(_message(body, answer, _content(answer), prompt))
        return await _stream(request, body, answer, prompt, *_behaviour(model))

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._receive(request)
        kind, status = _behaviour(str(body.get("model", "")))
        refused = _refusal(request)
        if refused is None and kind == "status":
            refused = _error(status)
        if refused is not None:
            return refused
        return _json_response({"input_tokens": _prompt_words(body)})


def _refusal(request: web.Request) -> web.Response | None:
    """The API's answer to a request without its two required headers."""
    if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
        return _error(401, message="x-api-key header is required")
    if not request.headers.get("anthropic-version"):
        return _error(400, message="anthropic-version: header is required")
    return None


def _prefill(body: dict[str, Any]) -> str | None:
    """The text of a final assistant turn (a prefill the answer continues), if there is one."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        return _text(last.get("content", ""))
    return None


def _answer(body: dict[str, Any]) -> Answer:
    turn: dict[str, Any] = next(
        (m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {}
    )
    content = turn.get("content", "")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        return Answer(f"result: {_text(results[-1].get('content', ''))}", None, "end_turn")
    text = _text(blocks)
    tools = body.get("tools") or []
    if tools and text.startswith("call:"):
        call = {"id": _id("toolu_"), "name": tools[0]["name"], "input": {"query": text[5:].strip()}}
        return Answer("", call, "tool_use")
    words, limit = text.split(), int(body.get("max_tokens") or 0)
    if limit and len(words) > limit:
        return Answer(" ".join(words[:limit]), None, "max_tokens")
    return Answer(text, None, "end_turn")


def _text(content: Any) -> str:
    """The text of a string or of a list of content blocks (text blocks joined by spaces)."""
    if isinstance(content, str):
        return content
    return " ".join(str(b["text"]) for b in content if b.get("type") == "text")


def _prompt_words(body: dict[str, Any]) -> int:
    """Words in the system prompt and in every message's text (including tool results)."""

    def words(value: Any) -> int:
        if isinstance(value, str):
            return len(value.split())
        if isinstance(value, list):
            return sum(words(v) for v in value)
        if isinstance(value, dict):
            return words(value.get("text", "")) + words(value.get("content", ""))
        return 0

    return words(body.get("system", "")) + words(body.get("messages", []))


def _prompt_usage(body: dict[str, Any], cache: set[bytes]) -> dict[str, int]:
    """The prompt's usage fields, from the cache marks (and `cache`, updated) or the system."""
    total = _prompt_words(body)
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
    for message in body.get("messages", []):
        content = message.get("content", "")
        blocks += [{"type": "text", "text": content}] if isinstance(content, str) else content
    marked: list[tuple[bytes, int]] = []  # (digest of the prefix, its words), per marked block
    words = 0
    for index, block in enumerate(blocks):
        words += len(_text([block]).split()) if block.get("type") == "text" else 0
        if block.get("cache_control") is not None:
            digest = hashlib.sha256(orjson.dumps(_unmarked(blocks[: index + 1]))).digest()
            marked.append((digest, words))
    if not marked:
        read = min(CACHED_SYSTEM_TOKENS, total) if system else 0
        return {
            "input_tokens": total - read,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": read,
        }
    read = max((n for digest, n in marked if digest in cache), default=0)
    written = marked[-1][1] - read
    cache.update(digest for digest, _ in marked)
    return {
        "input_tokens": total - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
    }


def _unmarked(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in block.items() if k != "cache_control"} for block in blocks]


def _content(answer: Answer) -> list[dict[str, Any]]:
    if answer.tool is not None:
        return [{"type": "tool_use", **answer.tool}]
    return [{"type": "text", "text": answer.text}]


def _message(
    body: dict[str, Any],
    answer: Answer,
    content: list[dict[str, Any]],
    prompt: dict[str, int],
    *,
    final: bool = True,
) -> dict[str, Any]:
    """A Message object; the one `message_start` carries is empty, with no stop reason yet."""
    return {
        "id": _id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": reported_model(str(body.get("model", ""))),
        "content": content,
        "stop_reason": answer.stop_reason if final else None,
        "stop_sequence": None,
        "usage": {**prompt, "output_tokens": answer.output_tokens if final else 1},
    }


async def _stream(
    request: web.Request,
    body: dict[str, Any],
    answer: Answer,
    prompt: dict[str, int],
    kind: str,
    arg: int,
) -> web.StreamResponse:
    """The documented event flow: message_start, one content block (start, ping, deltas,
    stop), message_delta with the stop reason and cumulative output_tokens, message_stop."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    response.headers["request-id"] = _id("req_")
    await response.prepare(request)

    async def send(event: str, **fields: Any) -> None:
        data = orjson.dumps({"type": event, **fields})
        await response.write(b"event: " + event.encode() + b"\ndata: " + data + b"\n\n")

    await send("message_start", message=_message(body, answer, [], prompt, final=False))
    block: dict[str, Any] = {"type": "text", "text": ""}
    if answer.tool is not None:  # a tool's input arrives as pieces of JSON text
        block = {"type": "tool_use", **answer.tool, "input": {}}
    await send("content_block_start", index=0, content_block=block)
    await send("ping")
    if answer.tool is not None:
        partial = orjson.dumps(answer.tool["input"]).decode()
        for i in range(0, len(partial), 8):
            delta = {"type": "input_json_delta", "partial_json": partial[i : i + 8]}
            await send("content_block_delta", index=0, delta=delta)
    words = answer.text.split(" ") if answer.text else []
    for i, word in enumerate(words):
        if kind == "drop" and i == arg:
            assert request.transport is not None
            request.transport.abort()
            return response
        delta = {"type": "text_delta", "text": word + (" " if i < len(words) - 1 else "")}
        await send("content_block_delta", index=0, delta=delta)
        if kind == "overloaded-midstream":
            await asyncio.sleep(0.05)  # the delta reaches the gateway's client first
            await send("error", error={"type": "overloaded_error", "message": "Overloaded"})
            await response.write_eof()
            return response
        await asyncio.sleep(0.01)
    await send("content_block_stop", index=0)
    stop = {"stop_reason": answer.stop_reason, "stop_sequence": None}
    await send("message_delta", delta=stop, usage={"output_tokens": answer.output_tokens})
    await send("message_stop")
    await response.write_eof()
    return response


def _error(
    status: int, *, retry_after: str | None = None, message: str | None = None
) -> web.Response:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    if message is None:
        message = (
            "Overloaded"
            if status == 529
            else f"upstream says {status} (secret sk-ant-upstream-abcdef123456)"
        )
    request_id = _id("req_")
    return web.json_response(
        {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id},
        status=status,
        dumps=_dumps,
        headers={"request-id": request_id, **({"retry-after": retry_after} if retry_after else {})},
    )


def _json_response(payload: dict[str, Any]) -> web.Response:
    return web.json_response(payload, dumps=_dumps, headers={"request-id": _id("req_")})


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]

"""The built-in `mock` provider: answers in process, deterministically, with no network.

Chat echoes the last user message (streamed in several chunks) and reports usage;
embeddings are unit vectors derived from a hash of each input; the model list names the two
models `serve --demo` routes to. It speaks the OpenAI wire
format, so it exercises the same pass-through path as a real provider.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping
from typing import Any

import orjson

from llmrelay.protocols.gemini_embeddings import vector_value
from llmrelay.providers.base import Operation, UnsupportedOperation, UpstreamRequest
from llmrelay.snapshot.model import ProviderSnap, RouteSnap

DEFAULT_DIMENSIONS = 64
#: The model list's address (a GET: probes and discovery), and what it lists.
MODELS_URL = "mock://models"
LISTED_MODELS = ("mock-chat", "mock-embedding")
_MAX_STREAM_CHUNKS = 8


class MockAdapter:
    protocol = "openai"

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        if operation not in (Operation.CHAT, Operation.EMBEDDINGS):
            raise UnsupportedOperation(f"the mock provider has no {operation.value}")
        payload["model"] = route.upstream_model
        return UpstreamRequest(
            url=f"mock://{operation.value}", headers={}, body=orjson.dumps(payload)
        )


def count_tokens(text: str) -> int:
    """A stable stand-in for a tokenizer: about four characters per token."""
    return max(1, (len(text) + 3) // 4) if text else 0


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def _split(text: str) -> list[str]:
    words = text.split(" ")
    per_chunk = max(1, math.ceil(len(words) / _MAX_STREAM_CHUNKS))
    pieces = [" ".join(words[i : i + per_chunk]) for i in range(0, len(words), per_chunk)]
    return [p + (" " if i < len(pieces) - 1 else "") for i, p in enumerate(pieces)]


def embed(text: str, dimensions: int) -> list[float]:
    values: list[float] = []
    counter = 0
    while len(values) < dimensions:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    vector = values[:dimensions]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class MockResponse:
    def __init__(self, status: int, parts: list[bytes]) -> None:
        self.status = status
        self._parts = parts

    def header(self, name: str) -> str | None:
        return None

    async def read(self) -> bytes:
        return b"".join(self._parts)

    async def next_chunk(self) -> bytes:
        return self._parts.pop(0) if self._parts else b""

    def release(self) -> None:
        self._parts = []


def _error(status: int, message: str) -> MockResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return MockResponse(status, [orjson.dumps(body)])


class MockTransport:
    async def send(self, request: UpstreamRequest, provider: ProviderSnap) -> MockResponse:
        if request.url == MODELS_URL:  # the model list (providers/model_list.py)
            return _models()
        payload = orjson.loads(request.body)
        if request.url == f"mock://{Operation.EMBEDDINGS.value}":
            return _embeddings(payload)
        return _chat(payload)


def _models() -> MockResponse:
    data = [{"id": name, "object": "model", "owned_by": "llmrelay"} for name in LISTED_MODELS]
    return MockResponse(200, [orjson.dumps({"object": "list", "data": data})])


def _chat(payload: dict[str, Any]) -> MockResponse:
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return _error(400, "messages must be a list")
    reply = _last_user_text(messages)
    prompt_tokens = sum(
        count_tokens(_text_of(m.get("content"))) + 3 for m in messages if isinstance(m, dict)
    )
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": count_tokens(reply),
        "total_tokens": prompt_tokens + count_tokens(reply),
    }
    ident = "chatcmpl-mock-" + hashlib.sha256(reply.encode()).hexdigest()[:20]
    created = int(time.time())
    model = payload.get("model")
    if not payload.get("stream"):
        body = {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        return MockResponse(200, [orjson.dumps(body)])

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""}, None)]
    events += [chunk({"content": piece}, None) for piece in _split(reply) if piece]
    events.append(chunk({}, "stop"))
    # Always, as a provider the gateway asked for it: the chat relay keeps it from a client
    # that did not ask (every stream is metered).
    events.append({**chunk({}, None), "choices": [], "usage": usage})
    parts = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    parts.append(b"data: [DONE]\n\n")
    return MockResponse(200, parts)


def _embeddings(payload: dict[str, Any]) -> MockResponse:
    raw = payload.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs:
        return _error(400, "input must be a string or a non-empty list")
    dimensions = payload.get("dimensions", DEFAULT_DIMENSIONS)
    if not isinstance(dimensions, int) or not 1 <= dimensions <= 4096:
        return _error(400, "dimensions must be an integer from 1 to 4096")
    as_base64 = payload.get("encoding_format") == "base64"
    data = []
    tokens = 0
    for index, item in enumerate(inputs):
        text = item if isinstance(item, str) else " ".join(str(t) for t in item)
        tokens += count_tokens(text)
        vector = embed(text, dimensions)
        data.append(
            {"object": "embedding", "index": index, "embedding": vector_value(vector, as_base64)}
        )
    body = {
        "object": "list",
        "data": data,
        "model": payload.get("model"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return MockResponse(200, [orjson.dumps(body)])

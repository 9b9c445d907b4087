"""Anthropic Messages clients served by providers that speak chat (OpenAI-compatible, Azure,
the mock) or another protocol reached through chat (Gemini). `over_chat` is the bridge
itself, shared with the Responses API's (responses_bridge.py).

The Messages request becomes a chat request (protocols.chat_anthropic), the provider's
adapter builds its own request from that, and the answer is read back as Messages: a chat
completion becomes a message, chat chunks become Anthropic's events. Error bodies are left in
the chat protocol's shape: the gateway reads only their message, which both shapes keep in
`error.message`, and renders the client's error itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson
import structlog

from llmrelay.protocols.chat_anthropic import anthropic_request_to_chat, chat_response_to_anthropic
from llmrelay.protocols.chat_anthropic_stream import ChatStreamToAnthropic
from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import UpstreamRequest, UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

BuildChat = Callable[[dict[str, Any]], UpstreamRequest]


def messages_over_chat(
    build_chat: BuildChat, route: RouteSnap, payload: dict[str, Any]
) -> UpstreamRequest:
    """The upstream request for a Messages `payload`, built by `build_chat` from its chat
    form, with a `translate` that reads the answer as Messages."""
    chat, dropped = anthropic_request_to_chat(payload, upstream_model=route.upstream_model)
    return over_chat(build_chat, route, chat, dropped, MessagesFromChat)


def over_chat(
    build_chat: BuildChat,
    route: RouteSnap,
    chat: dict[str, Any],
    dropped: list[str],
    wrap: Callable[..., UpstreamResponse],
) -> UpstreamRequest:
    """The provider's request for a client request already translated to `chat`, whose
    answer (read as chat by the provider's own translation, if it has one) `wrap` turns
    into the client's protocol: `wrap(response, model=..., stream=...)`."""
    if dropped:
        log.debug("translation_dropped_fields", provider=route.provider.slug, fields=dropped)
    request = build_chat(chat)
    inner = request.translate
    stream = chat.get("stream") is True
    model = route.upstream_model

    def translate(response: UpstreamResponse) -> UpstreamResponse:
        if inner is not None:
            response = inner(response)
        return wrap(response, model=model, stream=stream)

    return dataclasses.replace(request, translate=translate)


class MessagesFromChat:
    """A chat response (JSON or SSE) read as Anthropic Messages."""

    def __init__(self, inner: UpstreamResponse, *, model: str, stream: bool) -> None:
        self._inner = inner
        self._model = model
        self._parser = SSEParser() if stream else None
        self._events = ChatStreamToAnthropic(model=model, message_id=f"msg_{id(self):x}")
        self._ended = False
        self.status = inner.status

    def header(self, name: str) -> str | None:
        return self._inner.header(name)

    async def read(self) -> bytes:
        raw = await self._inner.read()
        if self.status >= 300:
            return raw  # the gateway reads `error.message`, present in both shapes
        try:
            body = orjson.loads(raw)
            return orjson.dumps(chat_response_to_anthropic(body, model=self._model))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UpstreamProtocolError(f"the answer is not a chat completion: {exc}") from None

    async def next_chunk(self) -> bytes:
        assert self._parser is not None
        while not self._ended:
            chunk = await self._inner.next_chunk()
            out: list[tuple[str, dict[str, Any]]] = []
            if not chunk:
                self._ended = True
                out.extend(self._events.finish())
            else:
                for data in self._parser.feed_data(chunk):
                    out.extend(self._take(data))
            if out:
                return b"".join(_event(name, data) for name, data in out)
        return b""

    def _take(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if data == b"[DONE]":
            return self._events.finish()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return [("malformed", {})]
        if not isinstance(chunk, dict):
            return []
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else str(error)
            return [
                ("error", {"type": "error", "error": {"type": "api_error", "message": message}})
            ]
        return self._events.feed(chunk)

    def release(self) -> None:
        self._inner.release()


def _event(name: str, data: dict[str, Any]) -> bytes:
    if name == "malformed":
        return b"event: malformed\ndata: !\n\n"  # dropped and counted by the relay
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

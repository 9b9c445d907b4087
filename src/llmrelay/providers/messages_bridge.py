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

from collections.abc import Callable
from typing import Any

import structlog

from llmrelay.protocols.chat_anthropic import anthropic_request_to_chat, chat_response_to_anthropic
from llmrelay.protocols.chat_anthropic_stream import ChatStreamToAnthropic
from llmrelay.providers.base import UpstreamRequest, UpstreamResponse
from llmrelay.providers.from_chat import Event, FromChat
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

    return UpstreamRequest(request.url, request.headers, request.body, translate, request.method)


class MessagesFromChat(FromChat):
    """A chat response read as Anthropic Messages."""

    def __init__(self, inner: UpstreamResponse, *, model: str, stream: bool) -> None:
        super().__init__(inner, stream=stream)
        self._model = model
        self._events = ChatStreamToAnthropic(model=model, message_id=f"msg_{id(self):x}")

    def _answer(self, completion: dict[str, Any]) -> dict[str, Any]:
        return chat_response_to_anthropic(completion, model=self._model)

    def _feed(self, chunk: dict[str, Any]) -> list[Event]:
        return self._events.feed(chunk)

    def _finish(self) -> list[Event]:
        return self._events.finish()

    def _error(self, message: str) -> Event:
        return ("error", {"type": "error", "error": {"type": "api_error", "message": message}})

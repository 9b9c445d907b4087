"""OpenAI Responses clients served through chat, for providers without the Responses API.

The Responses request becomes a chat request (protocols.responses_chat), and the answer a
Response object or the Responses stream events. Error bodies stay in the chat shape (the
gateway reads only their message).
"""

from __future__ import annotations

from typing import Any

from llmrelay.protocols.responses_chat import chat_response_to_responses, responses_request_to_chat
from llmrelay.protocols.responses_chat_stream import ChatStreamToResponses
from llmrelay.providers.base import UpstreamRequest, UpstreamResponse
from llmrelay.providers.from_chat import Event, FromChat
from llmrelay.providers.messages_bridge import BuildChat, over_chat
from llmrelay.snapshot.model import RouteSnap


def responses_over_chat(
    build_chat: BuildChat, route: RouteSnap, payload: dict[str, Any]
) -> UpstreamRequest:
    chat, dropped = responses_request_to_chat(payload, upstream_model=route.upstream_model)

    def wrap(response: UpstreamResponse, *, model: str, stream: bool) -> UpstreamResponse:
        return ResponsesFromChat(response, model=model, stream=stream, request=payload)

    return over_chat(build_chat, route, chat, dropped, wrap)


class ResponsesFromChat(FromChat):
    """A chat response read as the Responses API."""

    def __init__(
        self, inner: UpstreamResponse, *, model: str, stream: bool, request: dict[str, Any]
    ) -> None:
        super().__init__(inner, stream=stream)
        self._model = model
        self._request = request
        self._events = ChatStreamToResponses(model=model, request=request)

    def _answer(self, completion: dict[str, Any]) -> dict[str, Any]:
        return chat_response_to_responses(completion, model=self._model, request=self._request)

    def _feed(self, chunk: dict[str, Any]) -> list[Event]:
        return self._events.feed(chunk)

    def _finish(self) -> list[Event]:
        return self._events.finish()

    def _error(self, message: str) -> Event:
        return ("error", {"type": "error", "code": "upstream_error", "message": message})

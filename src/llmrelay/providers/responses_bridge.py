"""OpenAI Responses clients served through chat, for providers without the Responses API.

The Responses request becomes a chat request (protocols.responses_chat), and the answer a
Response object or the Responses stream events. Error bodies stay in the chat shape (the
gateway reads only their message). What both translations left out (the Responses request's
fields and tools, then the chat request's that the provider's own translation dropped) is on
the upstream request's `dropped`, for the `x-llmrelay-dropped` header.

OpenAI's own chat APIs (types openai and azure_openai) read none of the hub's reasoning
fields (`reasoning_details`, a tool call's `extra_content`) that a reasoning item written by
llmrelay brings back: they are taken off and noted as dropped.
"""

from __future__ import annotations

from typing import Any, Final

from llmrelay.protocols.responses_chat import chat_response_to_responses, responses_request_to_chat
from llmrelay.protocols.responses_chat_stream import ChatStreamToResponses
from llmrelay.providers.base import UpstreamRequest, UpstreamResponse
from llmrelay.providers.from_chat import Event, FromChat
from llmrelay.providers.messages_bridge import BuildChat, over_chat, strip_hub_fields
from llmrelay.snapshot.model import RouteSnap

#: Provider types whose chat API is OpenAI's own: no reasoning fields in requests.
_OPENAI_OWN: Final = frozenset({"openai", "azure_openai"})
#: Chat fields the bridge itself sets: their loss on the next hop is none of the client's.
_BRIDGE_FIELDS: Final = frozenset({"stream", "stream_options"})


def responses_over_chat(
    build_chat: BuildChat, route: RouteSnap, payload: dict[str, Any]
) -> UpstreamRequest:
    chat, dropped = responses_request_to_chat(payload, upstream_model=route.upstream_model)
    if route.provider.type in _OPENAI_OWN:
        strip_hub_fields(chat["messages"], dropped, "input.reasoning")
    inner: list[str] = []

    def build(body: dict[str, Any]) -> UpstreamRequest:
        request = build_chat(body)
        inner.extend(name for name in request.dropped if name not in _BRIDGE_FIELDS)
        return request

    def wrap(response: UpstreamResponse, *, model: str, stream: bool) -> UpstreamResponse:
        return ResponsesFromChat(response, model=model, stream=stream, request=payload)

    built = over_chat(build, route, chat, dropped, wrap)
    every = tuple(dict.fromkeys([*dropped, *inner]))
    return UpstreamRequest(
        built.url, built.headers, built.body, built.translate, built.method, dropped=every
    )


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

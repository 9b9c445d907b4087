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
from typing import Any, Final

import structlog

from llmrelay.protocols.anthropic_chat_stream import ChatStreamToAnthropic
from llmrelay.protocols.anthropic_reasoning import display_of, wants_thinking
from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.chat_anthropic import chat_response_to_anthropic
from llmrelay.providers.base import UpstreamRequest, UpstreamResponse
from llmrelay.providers.from_chat import Event, FromChat
from llmrelay.providers.openai_reasoning import takes_reasoning_effort
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

BuildChat = Callable[[dict[str, Any]], UpstreamRequest]


def messages_over_chat(
    build_chat: BuildChat, route: RouteSnap, payload: dict[str, Any]
) -> UpstreamRequest:
    """The upstream request for a Messages `payload`, built by `build_chat` from its chat
    form, with a `translate` that reads the answer as Messages."""
    chat, dropped = anthropic_request_to_chat(payload, upstream_model=route.upstream_model)
    if route.provider.type in OPENAI_OWN:
        strip_hub_fields(chat["messages"], dropped)
        if "reasoning_effort" in chat and not takes_reasoning_effort(route.upstream_model):
            # OpenAI refuses it for a model that does not reason (gpt-4.1...): left out.
            del chat["reasoning_effort"]
            config = payload.get("output_config")
            effort = isinstance(config, dict) and config.get("effort") is not None
            dropped.append("output_config.effort" if effort else "thinking")
    elif route.provider.type == "gemini":
        _for_gemini(payload, chat, dropped)
    thinking, display = wants_thinking(payload), display_of(payload)

    def wrap(response: UpstreamResponse, *, model: str, stream: bool) -> UpstreamResponse:
        return MessagesFromChat(
            response, model=model, stream=stream, thinking=thinking, display=display
        )

    return over_chat(build_chat, route, chat, dropped, wrap)


#: Provider types whose chat API is OpenAI's own: it reads none of the hub's reasoning
#: fields in a request (OpenAI-compatible servers do: DeepSeek, OpenRouter, vLLM).
OPENAI_OWN: Final = frozenset({"openai", "azure_openai"})
_HUB_FIELDS: Final = ("reasoning_content", "reasoning_details")


def _for_gemini(payload: dict[str, Any], chat: dict[str, Any], dropped: list[str]) -> None:
    """What the Gemini adapter does with the chat request, told in the client's fields:
    `top_k` it takes (chat has no such field, so it is added here); a user id and the
    parallel-calls switch it has no place for."""
    top_k = payload.get("top_k")
    if type(top_k) is int and top_k > 0 and "top_k" in dropped:
        chat["top_k"] = top_k
        dropped.remove("top_k")
    if "user" in chat:
        dropped.append("metadata.user_id")
    if chat.get("parallel_tool_calls") is False:
        dropped.append("tool_choice.disable_parallel_tool_use")


def strip_hub_fields(
    messages: list[dict[str, Any]], dropped: list[str], label: str = "messages.content.thinking"
) -> None:
    """The hub's reasoning fields taken off the assistant messages for OpenAI's own API (it
    refuses them); `label` names, in the client's protocol, what was dropped."""
    for message in messages:
        if message.get("role") != "assistant":
            continue
        found = False
        for name in _HUB_FIELDS:
            found = message.pop(name, None) is not None or found
        for call in message.get("tool_calls") or ():
            found = call.pop("extra_content", None) is not None or found
        if found and label not in dropped:
            dropped.append(label)


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

    return UpstreamRequest(
        request.url, request.headers, request.body, translate, request.method, tuple(dropped)
    )


class MessagesFromChat(FromChat):
    """A chat response read as Anthropic Messages."""

    def __init__(
        self,
        inner: UpstreamResponse,
        *,
        model: str,
        stream: bool,
        thinking: bool = True,
        display: str | None = None,
    ) -> None:
        super().__init__(inner, stream=stream)
        self._model = model
        self._thinking = thinking
        self._display = display
        self._events = ChatStreamToAnthropic(
            model=model, message_id=f"msg_{id(self):x}", thinking=thinking, display=display
        )

    def _answer(self, completion: dict[str, Any]) -> dict[str, Any]:
        return chat_response_to_anthropic(
            completion, model=self._model, thinking=self._thinking, display=self._display
        )

    def _feed(self, chunk: dict[str, Any]) -> list[Event]:
        return self._events.feed(chunk)

    def _finish(self) -> list[Event]:
        return self._events.finish()

    def _error(self, message: str) -> Event:
        return ("error", {"type": "error", "error": {"type": "api_error", "message": message}})

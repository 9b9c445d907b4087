"""Adapter for `anthropic` providers (the Messages API) serving chat-completions clients.

The chat request is translated to a Messages request (protocols.chat_anthropic) and the
answer back to a chat completion or chunk stream (providers.translated, and
providers.anthropic_stream for the stream): `x-api-key` and
`anthropic-version` authenticate; the base URL is the host root (`/v1/messages` is added).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
import structlog

from llmrelay.protocols.anthropic_reasoning import without_own_thinking
from llmrelay.protocols.chat_anthropic import chat_request_to_anthropic
from llmrelay.providers.anthropic_stream import AnthropicChatDecoder
from llmrelay.providers.base import Operation, UnsupportedOperation, UpstreamRequest
from llmrelay.providers.translated import TranslatedResponse
from llmrelay.snapshot.model import ProviderSnap, RouteSnap

log = structlog.get_logger(__name__)

ANTHROPIC_VERSION: Final = "2023-06-01"
_NO_HEADERS: Final[Mapping[str, str]] = {}


class AnthropicAdapter:
    protocol = "anthropic"

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        if operation in _NATIVE:
            # Same protocol: the body passes through with only `model` rewritten, and the
            # thinking blocks llmrelay made for a translated route taken out (Anthropic would
            # refuse their signatures: protocols/anthropic_reasoning.py).
            left_out: tuple[str, ...] = ()
            stripped = without_own_thinking(payload)
            if stripped is not None:
                payload, left_out = stripped, ("messages.content.thinking",)
            payload["model"] = route.upstream_model
            return UpstreamRequest(
                url=f"{route.provider.base_url}{_NATIVE[operation]}",
                headers=headers_for(route.provider, forwarded_headers),
                body=orjson.dumps(payload),
                dropped=left_out,
            )
        if operation is not Operation.CHAT:
            raise UnsupportedOperation(f"anthropic providers have no {operation.value} API")
        body, dropped = chat_request_to_anthropic(payload, upstream_model=route.upstream_model)
        if dropped:
            log.debug("translation_dropped_fields", provider=route.provider.slug, fields=dropped)
        # A stream always ends with the usage chunk (the record, the cost and the limits
        # need it); the chat relay keeps it from a client that did not ask.
        include_usage = True
        model = route.upstream_model
        stream = payload.get("stream") is True

        def translate(response: Any) -> TranslatedResponse:
            return TranslatedResponse(response, AnthropicChatDecoder(model, include_usage, stream))

        return UpstreamRequest(
            url=f"{route.provider.base_url}/v1/messages",
            headers=headers_for(route.provider, _NO_HEADERS),  # a chat client's are OpenAI's
            body=orjson.dumps(body),
            translate=translate,
            dropped=tuple(dropped),
        )


_NATIVE: Final = {
    Operation.MESSAGES: "/v1/messages",
    Operation.COUNT_TOKENS: "/v1/messages/count_tokens",
}


def headers_for(provider: ProviderSnap, forwarded: Mapping[str, str]) -> dict[str, str]:
    """The provider's headers; a Messages client's `anthropic-version` and `anthropic-beta`
    win over the default version (they choose the API behaviour the client was written
    for)."""
    headers = {
        **provider.headers,
        "content-type": "application/json",
        "anthropic-version": ANTHROPIC_VERSION,
        **forwarded,
    }
    if provider.api_key:
        headers["x-api-key"] = provider.api_key
    return headers

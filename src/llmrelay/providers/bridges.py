"""Which client protocols a provider serves itself, and the bridge through chat for the rest.

One rule for every adapter: a Messages request goes natively only to a provider that speaks
Anthropic's protocol, a Responses request only to one that serves the Responses API (OpenAI,
presets that say so), a Gemini request only to a Gemini provider; every other one is built by
the adapter from its chat form (its embeddings form for Gemini's embedContent) and its answer
read back (messages_bridge.py, responses_bridge.py, gemini_bridge.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from llmrelay.providers.base import Adapter, Operation, UnsupportedOperation, UpstreamRequest
from llmrelay.providers.gemini_bridge import gemini_embed_over_openai, gemini_over_chat
from llmrelay.providers.headers import of_kind
from llmrelay.providers.messages_bridge import messages_over_chat
from llmrelay.providers.presets import speaks_responses
from llmrelay.providers.responses_bridge import responses_over_chat
from llmrelay.snapshot.model import RouteSnap


def build_request(
    adapter: Adapter,
    operation: Operation,
    route: RouteSnap,
    payload: dict[str, Any],
    forwarded_headers: Mapping[str, str],
) -> UpstreamRequest:
    if operation is _CHAT:  # the common case, first: no bridge
        return adapter.build_request(operation, route, payload, forwarded_headers)
    provider = route.provider
    if operation is Operation.MESSAGES and adapter.protocol != "anthropic":
        bridge = messages_over_chat
    elif operation is Operation.RESPONSES and not (
        adapter.protocol == "openai" and speaks_responses(provider.type, provider.preset)
    ):
        bridge = responses_over_chat
    elif operation in _GEMINI and adapter.protocol != "gemini":
        return _gemini_bridged(adapter, operation, route, payload, forwarded_headers)
    else:
        return adapter.build_request(operation, route, payload, forwarded_headers)
    forwarded_headers = of_kind(dict(forwarded_headers), adapter.protocol)

    def build_chat(chat: dict[str, Any]) -> UpstreamRequest:
        return adapter.build_request(Operation.CHAT, route, chat, forwarded_headers)

    return bridge(build_chat, route, payload)


_CHAT: Final = Operation.CHAT
#: The Gemini client's operations.
_GEMINI: Final = frozenset(
    {
        Operation.GEMINI_GENERATE,
        Operation.GEMINI_STREAM,
        Operation.GEMINI_COUNT_TOKENS,
        Operation.GEMINI_EMBED,
        Operation.GEMINI_BATCH_EMBED,
    }
)


def _gemini_bridged(
    adapter: Adapter,
    operation: Operation,
    route: RouteSnap,
    payload: dict[str, Any],
    forwarded_headers: Mapping[str, str],
) -> UpstreamRequest:
    if operation is Operation.GEMINI_EMBED or operation is Operation.GEMINI_BATCH_EMBED:

        def build(inner: Operation, body: dict[str, Any]) -> UpstreamRequest:
            return adapter.build_request(inner, route, body, forwarded_headers)

        batch = operation is Operation.GEMINI_BATCH_EMBED
        return gemini_embed_over_openai(build, route, payload, batch=batch)
    if operation is Operation.GEMINI_COUNT_TOKENS:
        raise UnsupportedOperation(f"{route.provider.type} providers count no Gemini tokens")

    def build_chat(chat: dict[str, Any]) -> UpstreamRequest:
        return adapter.build_request(Operation.CHAT, route, chat, forwarded_headers)

    stream = operation is Operation.GEMINI_STREAM
    return gemini_over_chat(build_chat, route, payload, stream=stream)

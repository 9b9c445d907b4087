"""Which client protocols a provider serves itself, and the bridge through chat for the rest.

One rule for every adapter: a Messages request goes natively only to a provider that speaks
Anthropic's protocol, a Responses request only to one that serves the Responses API (OpenAI,
presets that say so); every other one is built by the adapter from its chat form and its answer
read back (messages_bridge.py, responses_bridge.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmrelay.providers.base import Adapter, Operation, UpstreamRequest
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
    provider = route.provider
    if operation is Operation.MESSAGES and adapter.protocol != "anthropic":
        bridge = messages_over_chat
    elif operation is Operation.RESPONSES and not (
        adapter.protocol == "openai" and speaks_responses(provider.type, provider.preset)
    ):
        bridge = responses_over_chat
    else:
        return adapter.build_request(operation, route, payload, forwarded_headers)

    def build_chat(chat: dict[str, Any]) -> UpstreamRequest:
        return adapter.build_request(Operation.CHAT, route, chat, forwarded_headers)

    return bridge(build_chat, route, payload)

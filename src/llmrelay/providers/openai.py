"""Adapter for `openai` and `openai_compatible` providers: the body passes through with
only `model` rewritten."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from llmrelay.providers.base import Operation, UnsupportedOperation, UpstreamRequest
from llmrelay.providers.presets import reports_stream_usage, speaks_responses
from llmrelay.snapshot.model import ProviderSnap, RouteSnap

_PATHS: Final = {
    Operation.CHAT: "/chat/completions",
    Operation.EMBEDDINGS: "/embeddings",
    Operation.RESPONSES: "/responses",  # for providers that serve it (presets.py)
    Operation.RESPONSES_COMPACT: "/responses/compact",
}


class OpenAIAdapter:
    protocol = "openai"

    def __init__(self) -> None:
        #: provider (or provider resource) id -> (the ProviderSnap it was built from, its
        #: fixed request headers)
        self._fixed: dict[str, tuple[ProviderSnap, dict[str, str]]] = {}

    def _fixed_headers(self, provider: ProviderSnap) -> dict[str, str]:
        """Headers every request to this provider carries, built once per snapshot (and
        per resource: each account calls with its own credential)."""
        key = provider.resource_id or provider.id
        held = self._fixed.get(key)
        if held is not None and held[0] is provider:
            return held[1]
        headers = fixed_headers(provider)
        self._fixed[key] = (provider, headers)
        return headers

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        if operation not in _PATHS or (
            operation is Operation.RESPONSES_COMPACT
            and not speaks_responses(route.provider.type, route.provider.preset)
        ):
            raise UnsupportedOperation(f"provider has no {operation.value} API")
        provider = route.provider
        payload["model"] = route.upstream_model
        if operation is Operation.CHAT and payload.get("stream") is True:
            ask_stream_usage(payload, provider)
        return UpstreamRequest(
            url=f"{provider.base_url}{_PATHS[operation]}",
            headers={**forwarded_headers, **self._fixed_headers(provider)},
            body=orjson.dumps(payload),
        )


def ask_stream_usage(payload: dict[str, Any], provider: ProviderSnap) -> None:
    """Ask for the usage chunk even when the client did not: without it a stream's tokens,
    its cost, budgets and tpm reconciliation would rest on estimates. The chat relay keeps
    the chunk from a client that did not ask (gateway/relay.py)."""
    options = payload.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return
    if reports_stream_usage(provider.type, provider.preset):
        payload["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
        }


def fixed_headers(provider: ProviderSnap) -> dict[str, str]:
    """The provider's configured headers and its credential as a bearer token."""
    headers = {**provider.headers, "content-type": "application/json"}
    if provider.api_key:
        headers["authorization"] = f"Bearer {provider.api_key}"
    return headers

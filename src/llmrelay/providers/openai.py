"""Adapter for `openai` and `openai_compatible` providers: the body passes through with
only `model` rewritten."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from llmrelay.providers.base import Operation, UpstreamRequest
from llmrelay.snapshot.model import RouteSnap

_PATHS = {Operation.CHAT: "/chat/completions", Operation.EMBEDDINGS: "/embeddings"}


class OpenAIAdapter:
    protocol = "openai"

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        provider = route.provider
        headers = {**forwarded_headers, **provider.headers}
        headers["content-type"] = "application/json"
        if provider.api_key:
            headers["authorization"] = f"Bearer {provider.api_key}"
        payload["model"] = route.upstream_model
        return UpstreamRequest(
            url=f"{provider.base_url}{_PATHS[operation]}",
            headers=headers,
            body=orjson.dumps(payload),
        )

"""Adapter for `azure_openai` providers: the OpenAI wire format at deployment URLs.

A route's `upstream_model` is the Azure deployment name: requests go to
`{base_url}/openai/deployments/{deployment}/chat/completions?api-version=...` with the key in
`api-key`. Azure's answers are OpenAI-shaped, its content-filter refusal included (a 400 with
code `content_filter` and the filtered categories, returned to the client as it is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson

from llmrelay.providers.base import Operation, UnsupportedOperation, UpstreamRequest
from llmrelay.snapshot.model import RouteSnap

DEFAULT_API_VERSION = "2024-10-21"
_PATHS = {Operation.CHAT: "chat/completions", Operation.EMBEDDINGS: "embeddings"}


class AzureOpenAIAdapter:
    protocol = "openai"

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        if operation not in _PATHS:
            raise UnsupportedOperation(f"azure_openai providers have no {operation.value}")
        provider = route.provider
        deployment = quote(route.upstream_model, safe="")
        version = quote(provider.api_version or DEFAULT_API_VERSION, safe="")
        payload["model"] = route.upstream_model
        headers = {**forwarded_headers, **provider.headers, "content-type": "application/json"}
        if provider.api_key:
            headers["api-key"] = provider.api_key
        return UpstreamRequest(
            url=f"{provider.base_url}/openai/deployments/{deployment}/{_PATHS[operation]}"
            f"?api-version={version}",
            headers=headers,
            body=orjson.dumps(payload),
        )

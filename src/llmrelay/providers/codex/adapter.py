"""Adapter for `openai_codex` providers: the Responses API at the ChatGPT Codex backend
(`base_url`, by default https://chatgpt.com/backend-api/codex).

The backend speaks OpenAI's Responses wire format with its own terms, as the Codex CLI meets
them: it stores nothing (`store` is always false: the gateway keeps the responses itself and
sends a continued conversation whole, gateway/responses.py; input items go without their
`id`s) and it answers only as a stream. A
client that did not ask for a stream gets the stream's final `response.completed` response
as its JSON answer (`completed_from_stream`). `/responses/compact` answers plain JSON.

Headers: the Codex CLI's `originator` and `OpenAI-Beta: responses=experimental`, and the
conversation's `session_id` (the request's `prompt_cache_key`, which Codex sets to its
session) so the backend's prompt cache follows the conversation. The credentials
(`authorization`, `chatgpt-account-id`) are added by the transport (transport.py), which
holds the account. Image generation (the virtual model `codex-gpt-image-2`) is a Responses
call with the image tool (images.py). Chat, Messages and embeddings are not served: the next
route is tried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from llmrelay.providers.base import (
    Operation,
    UnsupportedOperation,
    UpstreamRequest,
    UpstreamResponse,
)
from llmrelay.providers.codex.images import image_request, images_from_stream
from llmrelay.providers.codex.rewritten import RewrittenAnswer
from llmrelay.providers.errors import UpstreamErrorEvent, UpstreamProtocolError
from llmrelay.snapshot.model import RouteSnap

ORIGINATOR: Final = "codex_cli_rs"
#: The client version the backend's model list is asked for.
CLIENT_VERSION: Final = "0.99.0"
_PATHS: Final = {
    Operation.RESPONSES: "/responses",
    Operation.RESPONSES_COMPACT: "/responses/compact",
    Operation.IMAGES: "/responses",  # the image tool of a Responses call (images.py)
}


class OpenAICodexAdapter:
    protocol = "openai"

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        path = _PATHS.get(operation)
        if path is None:
            raise UnsupportedOperation(
                f"openai_codex providers serve only the Responses API, not {operation.value}"
            )
        provider = route.provider
        headers = {
            **forwarded_headers,
            "openai-beta": "responses=experimental",
            "originator": ORIGINATOR,
            **provider.headers,
            "content-type": "application/json",
        }
        cache_key = payload.get("prompt_cache_key")
        if isinstance(cache_key, str) and cache_key:
            headers["session_id"] = cache_key[:200]
        if operation is Operation.IMAGES:
            headers["accept"] = "text/event-stream"
            return UpstreamRequest(
                url=f"{provider.base_url}{path}",
                headers=headers,
                body=orjson.dumps(image_request(payload, route.upstream_model)),
                translate=_images,
            )
        body = {**payload, "model": route.upstream_model}
        translate = None
        if operation is Operation.RESPONSES:
            body["store"] = False
            given = payload.get("input")
            if isinstance(given, list):
                body["input"] = without_item_ids(given)
            if payload.get("stream") is not True:
                translate = completed_from_stream
            body["stream"] = True
            headers["accept"] = "text/event-stream"
        return UpstreamRequest(
            url=f"{provider.base_url}{path}",
            headers=headers,
            body=orjson.dumps(body),
            translate=translate,
        )


def without_item_ids(items: list[Any]) -> list[Any]:
    """Input items without their `id`s: the backend keeps no items, so an id (of an output
    item sent back, as a conversation the gateway stored is) names nothing there and is
    refused; the Codex CLI sends its history without them too."""
    return [
        {k: v for k, v in item.items() if k != "id"}
        if isinstance(item, dict) and "id" in item
        else item
        for item in items
    ]


def completed_from_stream(inner: UpstreamResponse) -> UpstreamResponse:
    """A Responses stream read to its end, answered as the one Response JSON it completed
    with (for a client that asked for no stream)."""
    return RewrittenAnswer(inner, completed_response)


def _images(inner: UpstreamResponse) -> UpstreamResponse:
    """The image call's stream -> its completed Response -> the Images API's answer."""
    return images_from_stream(completed_from_stream(inner))


def completed_response(stream: bytes) -> bytes:
    """The `response` of the stream's `response.completed` (or `response.incomplete`) event."""
    for block in stream.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"".join(
            line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]":
            continue
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind in ("response.completed", "response.incomplete") and isinstance(
            event.get("response"), dict
        ):
            return orjson.dumps(event["response"])
        if kind in ("response.failed", "error"):
            failed = event.get("response", event)
            error = failed.get("error") if isinstance(failed, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            raise UpstreamErrorEvent(str(message or "the response failed"))
    raise UpstreamProtocolError("the Codex backend's stream ended before its response completed")

"""The mock upstream's model lists and its credential check (tests.support.mock_upstream),
in each provider's own shape, for health probes and model discovery:

    GET /v1/models             OpenAI's list; Anthropic's (paged) with an `anthropic-version`
    GET /v1beta/models         Gemini's (paged, `models/` names, token limits)
    GET /openai/models         Azure OpenAI's (the resource's models)

`MockUpstream.listed_models` is what they list; `MockUpstream.models_status` makes them answer
that status instead (an OpenAI-shaped error); each request is kept in `listings` (not in
`requests`, which tests count for the model calls).

A credential in `MockUpstream.refused_keys` (as `Authorization: Bearer`, `x-api-key`,
`api-key` or `x-goog-api-key`) is refused on every route, the way each provider refuses it:
401 (OpenAI's message quotes part of the key, as OpenAI's does), Anthropic's
authentication_error, Azure's 401, and Gemini's 400 with reason API_KEY_INVALID.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

if TYPE_CHECKING:
    from tests.support.mock_upstream import MockUpstream

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: A page of the paged lists (Anthropic, Gemini) holds this many models, so tests see paging.
PAGE = 2


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def presented_key(request: web.Request) -> str | None:
    headers = request.headers
    scheme, _, value = headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return value.strip()
    for name in ("x-api-key", "api-key", "x-goog-api-key"):
        if headers.get(name):
            return headers[name]
    return None


def refusal(request: web.Request, key: str) -> web.Response:
    headers = request.headers
    if "x-goog-api-key" in headers:
        return _json(
            {
                "error": {
                    "code": 400,
                    "message": "API key not valid. Please pass a valid API key.",
                    "status": "INVALID_ARGUMENT",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "API_KEY_INVALID",
                            "domain": "googleapis.com",
                        }
                    ],
                }
            },
            400,
        )
    if "x-api-key" in headers:
        error = {"type": "authentication_error", "message": "invalid x-api-key"}
        return _json({"type": "error", "error": error}, 401)
    if "api-key" in headers:
        message = "Access denied due to invalid subscription key or wrong API endpoint."
        return _json({"error": {"code": "401", "message": message}}, 401)
    return _json(
        {
            "error": {
                "message": f"Incorrect API key provided: {key}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
                "param": None,
            }
        },
        401,
    )


class ModelLists:
    def __init__(self, upstream: MockUpstream) -> None:
        self.upstream = upstream

    @web.middleware
    async def credentials(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        key = presented_key(request)
        upstream = self.upstream
        if key is not None and key in upstream.refused_keys:
            upstream.refusals += 1
            return refusal(request, key)
        status = None if key is None else upstream.failing_keys.get(key)
        if key is not None and status is not None:
            upstream.failed_by_key[key] = upstream.failed_by_key.get(key, 0) + 1
            message = f"upstream says {status} for this account"
            return _json({"error": {"message": message, "type": "upstream_test"}}, status)
        return await handler(request)

    def _seen(self, request: web.Request) -> web.Response | None:
        from tests.support.mock_upstream import ReceivedRequest

        upstream = self.upstream
        upstream.listings.append(
            ReceivedRequest(request.path, dict(request.headers), {}, dict(request.query))
        )
        status = upstream.models_status
        if status is None or 200 <= status < 300:
            return None
        message = f"upstream says {status} (secret sk-upstream-abcdef123456)"
        return _json({"error": {"message": message, "type": "upstream_test"}}, status)

    async def openai_or_anthropic(self, request: web.Request) -> web.StreamResponse:
        refused = self._seen(request)
        if refused is not None:
            return refused
        names = self.upstream.listed_models
        if "anthropic-version" not in request.headers:
            data = [{"id": n, "object": "model", "owned_by": "mock"} for n in names]
            return _json({"object": "list", "data": data})
        after = request.query.get("after_id")
        start = names.index(after) + 1 if after in names else 0
        limit = min(int(request.query.get("limit", "20")), PAGE)
        page = names[start : start + limit]
        data = [
            {
                "type": "model",
                "id": n,
                "display_name": n.title(),
                "created_at": "2025-01-01T00:00:00Z",
            }
            for n in page
        ]
        more = start + limit < len(names)
        return _json(
            {
                "data": data,
                "has_more": more,
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
            }
        )

    async def gemini(self, request: web.Request) -> web.StreamResponse:
        refused = self._seen(request)
        if refused is not None:
            return refused
        names = self.upstream.listed_models
        start = int(request.query.get("pageToken") or 0)
        page = names[start : start + PAGE]
        models = [
            {
                "name": f"models/{n}",
                "displayName": n.title(),
                "inputTokenLimit": 1_048_576,
                "outputTokenLimit": 65_536,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            }
            for n in page
        ]
        body: dict[str, Any] = {"models": models}
        if start + PAGE < len(names):
            body["nextPageToken"] = str(start + PAGE)
        return _json(body)

    async def azure(self, request: web.Request) -> web.StreamResponse:
        refused = self._seen(request)
        if refused is not None:
            return refused
        if "api-version" not in request.query:
            return _json({"error": {"code": "404", "message": "Resource not found"}}, 404)
        data = [
            {
                "id": n,
                "object": "model",
                "status": "succeeded",
                "lifecycle_status": "generally-available",
            }
            for n in self.upstream.listed_models
        ]
        return _json({"object": "list", "data": data})

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self.credentials)
        app.router.add_get("/v1/models", self.openai_or_anthropic)
        app.router.add_get("/v1beta/models", self.gemini)
        app.router.add_get("/openai/models", self.azure)

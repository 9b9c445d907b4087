"""CORS for the model API (`/v1/*`), for the console's Playground when it is served from
another origin than the model API (the admin listener on its own port, or another host):
the browser then asks before each call (a preflight) and reads the answer only when it names
the console's origin.

Only listed origins (Settings.data_plane_origins) are answered; no credentials are allowed
(the Playground sends its key in Authorization, never a cookie). With none listed the app is
not wrapped at all: the data plane costs exactly what it did.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Headers a caller may send (the key, the body's type, the ids and tags of the contract).
_ALLOWED_HEADERS = (
    b"authorization, x-api-key, content-type, anthropic-version, anthropic-beta, "
    b"x-request-id, x-llmrelay-route-tag, openai-organization, openai-project"
)
#: Headers the page may read from the answer (which model and provider served it).
_EXPOSED = (
    b"x-request-id, x-llmrelay-model, x-llmrelay-provider, retry-after, "
    b"x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset"
)
_MAX_AGE = b"600"


def _origin(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == b"origin":
            return bytes(value)
    return None


class DataPlaneCors:
    """Answers preflights and adds the CORS headers on `/v1` for the allowed origins."""

    def __init__(self, app: ASGIApp, origins: Collection[str]) -> None:
        self.app = app
        self.origins = frozenset(o.encode() for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/v1"):
            await self.app(scope, receive, send)
            return
        origin = _origin(scope)
        if origin is None or origin not in self.origins:
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "OPTIONS":
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [
                        (b"access-control-allow-origin", origin),
                        (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                        (b"access-control-allow-headers", _ALLOWED_HEADERS),
                        (b"access-control-max-age", _MAX_AGE),
                        (b"vary", b"Origin"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers += [
                    (b"access-control-allow-origin", origin),
                    (b"access-control-expose-headers", _EXPOSED),
                    (b"vary", b"Origin"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)

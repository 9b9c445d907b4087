"""The ASGI entry point: a data-plane call by its (method, path), everything else (health,
metrics, lifespan, the admin API) to the Starlette app that app.py assembles.

Here rather than in app.py so mypyc compiles it with the request path it starts
(llmrelay/compiled_modules.py): every request of the process passes through `__call__`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence

import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from llmrelay.gateway.asgi import send_json
from llmrelay.gateway.errors import GatewayError
from llmrelay.gateway.ingress import IPNetwork, RequestContext, begin, refuse_too_large
from llmrelay.observability.logging import REQUEST_ID
from llmrelay.protocols import gemini_models
from llmrelay.protocols.anthropic_models import error_body as anthropic_error_body
from llmrelay.protocols.openai import error_body

#: A data-plane handler: the ASGI triple and the context ingress made.
Handler = Callable[[Scope, Receive, Send, RequestContext], Awaitable[None]]

log = structlog.get_logger(__name__)


class GatewayApp:
    """Data-plane routes are dispatched from a dict, with ingress done inline (request id,
    client IP, body cap): no middleware stack, no route matching by pattern."""

    def __init__(
        self,
        handlers: dict[tuple[str, str], Handler],
        fallback: ASGIApp,
        *,
        trusted_proxies: Sequence[IPNetwork],
        max_body_bytes: int,
        prefixed: dict[str, Handler] | None = None,
    ) -> None:
        self._handlers = handlers
        self._prefixed = tuple((prefixed or {}).items())
        self._fallback = fallback
        self._trusted = tuple(trusted_proxies)
        self._max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self._handlers.get((scope.get("method", ""), scope.get("path", "")))
        if handler is None and scope.get("type") == "http":
            path = scope.get("path", "")
            handler = next((h for p, h in self._prefixed if path.startswith(p)), None)
        if handler is None:  # not a data-plane call (or lifespan, websocket)
            await self._fallback(scope, receive, send)
            return
        context, declared = begin(scope, self._trusted)
        # Every line logged while handling it carries its id (~0.2 us: see REQUEST_ID).
        REQUEST_ID.set(context.request_id)
        if declared is not None and declared > self._max_body:
            render = error_renderer(str(scope.get("path", "")))
            await refuse_too_large(context.request_id, self._max_body, send, render)
            return
        try:
            await handler(scope, receive, send, context)
        except Exception:  # process boundary: a bug must not take the connection silently
            log.exception("unhandled_error", request_id=context.request_id)
            error = GatewayError("internal error")
            body = error_renderer(str(scope.get("path", "")))(error, context.request_id)
            with contextlib.suppress(Exception):  # fails if the answer had already started
                await send_json(send, 500, body, ((b"x-request-id", context.request_id.encode()),))


def error_renderer(path: str) -> Callable[[GatewayError, str], bytes]:
    """The error shape of the API a path belongs to: Anthropic's under /v1/messages,
    Google's under /v1beta (and /v1alpha), OpenAI's elsewhere (only on the error paths: a
    request that succeeds never asks)."""
    if path.startswith("/v1/messages"):
        return anthropic_error_body
    if path.startswith(("/v1beta", "/v1alpha")):
        return gemini_error_body
    return error_body


def gemini_error_body(error: GatewayError, request_id: str) -> bytes:
    return gemini_models.error_body(
        error.status, error.message, reason=error.code, request_id=request_id
    )

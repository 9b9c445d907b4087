"""Security headers on every console answer, and the same-origin check of its forms.

The Content-Security-Policy allows nothing but the console's own files: no inline script or
style (charts are SVG with attributes and classes, the theme and live parts are files under
/static), no other origin for scripts, styles, images, fetches (the Playground calls this
same origin's data plane) or form targets, and no framing."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "manifest-src 'self'",
    )
)
HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), payment=()",
}


class SecurityHeaders:
    """Adds HEADERS to every answer; pages (not static files) are never cached, since they
    show one user's data and sometimes a secret shown once."""

    def __init__(self, app: ASGIApp, api_origin: str | None = None) -> None:
        self.app = app
        self.headers = dict(HEADERS)
        if api_origin:  # the Playground calls the model API there (LLMRELAY_PUBLIC_API_URL)
            self.headers["content-security-policy"] = CONTENT_SECURITY_POLICY.replace(
                "connect-src 'self'", f"connect-src 'self' {api_origin}"
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    headers[name] = value
                if not static:
                    headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


def same_origin(request: Request) -> bool:
    """Whether a form POST comes from a page of this site: its Origin (or, without one, its
    Referer) names the host the request was sent to. Browsers send Origin on every POST; a
    request with neither (a script, curl) is let through: the session cookie's SameSite=Lax
    and the CSRF token already stop other sites."""
    host = request.headers.get("host", "")
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer is None:
            return True
        origin = referer
    if origin == "null":
        return False
    return urlsplit(origin).netloc == host

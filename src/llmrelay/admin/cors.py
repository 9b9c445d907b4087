"""CORS for the admin API, so a console served from another origin can call it.

Wraps only the app mounted at /api/admin (llmrelay.app): the data plane's `/v1` routes are
dispatched before the Starlette app is reached and never pass through this middleware, so
they stay free of it (browsers calling models directly would expose a key anyway).

With no origins configured the admin app is returned unwrapped: no CORS header at all, the
browser's same-origin rule applies. `*` together with credentials is refused in production
(startup_checks.py); in development Starlette then echoes any origin, which is why it warns.
"""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from llmrelay.settings import Settings

#: Methods the admin API uses.
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: Response headers the console's script may read (ETag for If-Match, the request id).
_EXPOSED = ("ETag", "Location", "X-Request-ID")
#: How long a browser may cache a preflight answer (seconds).
_MAX_AGE_S = 600


def with_cors(app: ASGIApp, settings: Settings) -> ASGIApp:
    """`app` behind CORS for LLMRELAY_CORS_ORIGINS, or `app` itself when none are listed."""
    if not settings.cors_origins:
        return app
    return CORSMiddleware(
        app,
        allow_origins=settings.cors_origins,
        allow_methods=_METHODS,
        # Any request header (Authorization, Content-Type, If-Match, the CSRF header):
        # which origin may call is what CORS protects, not which headers it sends.
        allow_headers=("*",),
        allow_credentials=settings.cors_credentials,
        expose_headers=_EXPOSED,
        max_age=_MAX_AGE_S,
    )

"""Values a page hands to the next page, sealed (AES-GCM under LLMRELAY_SECRET_KEY) in a
short-lived cookie: what a form's POST made, shown once by the GET its redirect leads to (a
key's secret, a temporary password, a test's result), and the input of a form that reached
an ended session, kept through the sign-in so it can be sent again.

Every form answers with a redirect, so a reload never posts it twice; the value rides along in
the cookie (HttpOnly, SameSite=Lax, a few minutes at most), is bound to the one path it is for,
and is deleted by the page that shows it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from llmrelay.settings import Environment, Settings
from llmrelay.store.crypto import CredentialError, Sealer

FLASH_COOKIE = "llmrelay_console_flash"
#: How long a flash waits for the page it is for.
FLASH_S = 120
#: How long the input of a form sent after the session ended waits for the sign-in.
DRAFT_S = 900
_CONTEXT = "console.flash"
#: Form fields never kept in a draft (the CSRF token is renewed by the sign-in).
_NOT_KEPT = frozenset({"csrf_token"})


def seal(sealer: Sealer, path: str, value: Mapping[str, Any], ttl_s: float) -> str:
    plain = orjson.dumps({"p": path, "v": dict(value), "x": time.time() + ttl_s})
    return sealer.seal(plain, context=_CONTEXT)


def unseal(sealer: Sealer | None, sealed: str | None) -> tuple[str, dict[str, Any]] | None:
    """(path, value) of a sealed flash while it is fresh, else None."""
    if sealer is None or not sealed:
        return None
    try:
        found = orjson.loads(sealer.open(sealed, context=_CONTEXT))
    except (CredentialError, orjson.JSONDecodeError, ValueError):
        return None
    if not isinstance(found, dict) or float(found.get("x", 0)) < time.time():
        return None
    value = found.get("v")
    return str(found.get("p", "")), value if isinstance(value, dict) else {}


def set_flash(
    response: Response,
    settings: Settings,
    sealer: Sealer | None,
    path: str,
    value: Mapping[str, Any],
    ttl_s: float = FLASH_S,
) -> None:
    """Hand `value` to the next GET of `path` (nothing when no secret key is open)."""
    if sealer is None:
        return
    response.set_cookie(
        FLASH_COOKIE,
        seal(sealer, path, value, ttl_s),
        max_age=int(ttl_s),
        path="/",
        secure=settings.env is Environment.PRODUCTION,
        httponly=True,
        samesite="lax",
    )


def read_flash(request: Request, sealer: Callable[[], Sealer | None]) -> dict[str, Any] | None:
    """The flash meant for this request's path, or None (the caller deletes the cookie)."""
    opened = unseal(sealer(), request.cookies.get(FLASH_COOKIE))
    if opened is None or opened[0] != request.url.path:
        return None
    return opened[1]


def clear_flash(response: Response) -> None:
    response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="lax")


def draft_of(path: str, fields: Mapping[str, str]) -> dict[str, Any]:
    """What a form sent, as a draft to send again after signing in."""
    return {"action": path, "fields": {k: v for k, v in fields.items() if k not in _NOT_KEPT}}

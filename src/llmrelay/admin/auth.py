"""Who may call the admin API. For now one principal: the platform admin holding
`LLMRELAY_ADMIN_TOKEN` (console sessions and roles come with the control-plane work).
Without the token set, the admin API is closed: every route answers 401 saying so."""

from __future__ import annotations

import hmac

from fastapi import Request

from llmrelay.admin.errors import AdminError
from llmrelay.admin.state import AdminState


def require_admin(request: Request) -> None:
    state: AdminState = request.app.state.admin
    token = state.admin_token
    if not token:
        raise AdminError(
            401,
            "the admin API is disabled: set LLMRELAY_ADMIN_TOKEN and send it as a Bearer token",
            "authentication_error",
        )
    presented = request.headers.get("authorization", "")
    scheme, _, value = presented.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        value.strip().encode(), token.encode()
    ):
        raise AdminError(401, "a valid admin Bearer token is required", "authentication_error")

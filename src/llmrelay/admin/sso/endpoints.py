"""/api/admin/auth/sso: whether single sign-on is on (GET), starting a sign-in at the
identity provider (POST /begin) and finishing it with the provider's code (POST /finish: a
session, as POST /auth/login makes). No credentials needed: the provider vouches for the
person. HTTP only: the rules are in service.py."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from llmrelay.admin import audit
from llmrelay.admin.errors import AdminError, documented
from llmrelay.admin.identity import endpoints as identity
from llmrelay.admin.identity import schemas as identity_schemas
from llmrelay.admin.identity import sessions
from llmrelay.admin.identity.service import end_session_of_token
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.sso import service
from llmrelay.admin.sso.schemas import BeginIn, BeginOut, FinishIn, SsoInfoOut
from llmrelay.admin.state import AdminState

router = APIRouter(prefix="/auth/sso", tags=["identity"])
_ERRORS = documented(
    {
        502: "The identity provider could not be reached or answered something unusable",
    }
)


def _on(admin: AdminState) -> None:
    if admin.sso is None:
        raise AdminError(
            404, "single sign-on is not configured (LLMRELAY_OIDC_ISSUER)", "not_found"
        )


@router.get("")
async def sso_info(request: Request) -> SsoInfoOut:
    """Whether single sign-on is configured, and the name its button shows."""
    sso = state(request).sso
    return SsoInfoOut(enabled=sso is not None, name=sso.name if sso is not None else None)


@router.post("/begin", responses=_ERRORS)
async def begin(request: Request, body: BeginIn) -> BeginOut:
    """The provider's authorization URL for a new sign-in (code flow, PKCE S256), and the
    sign-in's sealed state to hand back to /finish."""
    admin = state(request)
    _on(admin)
    audit.note_anonymous(request, "auth.sso_begin", "sso", None, None, None)
    return await service.begin(
        admin.sso, admin.sso_client, admin.secrets(), body.redirect_uri, body.next
    )


@router.post("/finish", responses=_ERRORS)
async def finish(
    request: Request, session: Session, body: FinishIn, response: Response
) -> identity_schemas.SessionOut:
    """Check the provider's answer and sign the person in: its account (made now on a first
    sign-in) with the memberships its groups grant; a new session, as POST /auth/login."""
    admin = state(request)
    _on(admin)
    audit.note_anonymous(request, "auth.sso_login", "user", None, None, None)
    user, made, next_path = await service.finish(
        session, admin.sso, admin.sso_client, admin.secrets(), admin.passwords, body
    )
    after = {"signed_in": True, "account": "made" if made else "found"}
    audit.note_anonymous(request, "auth.sso_login", "user", user.id, user.email, after)
    await end_session_of_token(session, sessions.presented_token(request))
    started = await sessions.start(
        session,
        admin.sessions,
        user.id,
        audit.client_ip(request),
        request.headers.get("user-agent"),
    )
    out = await identity.session_out(session, user, started)
    await session.commit()
    sessions.set_cookie(response, admin.sessions, started)
    response.headers["x-llmrelay-next"] = next_path
    if made:
        response.headers["x-llmrelay-account"] = "made"
    return out

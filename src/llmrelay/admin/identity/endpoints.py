"""/api/admin/auth/*: sign in and out, who am I, change my password, two-factor setup.
HTTP only: the rules are in service.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, authenticate
from llmrelay.admin.errors import AdminError, documented
from llmrelay.admin.identity import repository, schemas, service, sessions
from llmrelay.admin.identity.service import SignIn, SignInFailed
from llmrelay.admin.kit.http import Session, state
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import User

router = APIRouter(prefix="/auth", tags=["auth"])

SignedIn = Annotated[Actor, Depends(authenticate)]


def iso(moment: object) -> str:
    return str(getattr(moment, "isoformat", lambda: moment)()).replace("+00:00", "Z")


async def _me(session: AsyncSession, actor: Actor) -> schemas.MeOut:
    if actor.user_id is None:
        return schemas.MeOut(kind=actor.kind, user=None, platform_admin=True, memberships=[])
    user = await repository.user_by_id(session, actor.user_id)
    if user is None:
        raise AdminError(401, "the account is gone", "authentication_error")
    held = await repository.memberships(session, user.id)
    names = await repository.tenant_names(session, [m.tenant_id for m, _ in held])
    second = any(r for _, r in held) and await service.has_second_factor(session, user)
    return schemas.MeOut(
        kind=actor.kind,
        user=user_out(user),
        platform_admin=user.platform_admin,
        memberships=[
            schemas.MembershipOut(
                tenant_id=m.tenant_id,
                tenant_name=names.get(m.tenant_id),
                role=m.role,
                project_ids=m.project_ids,
                two_factor_required=required and not second,
            )
            for m, required in held
        ],
        password_change_required=user.password_change_required,
    )


def user_out(user: User) -> schemas.UserOut:
    return schemas.UserOut(
        id=user.id,
        email=user.email,
        name=user.name,
        platform_admin=user.platform_admin,
        disabled=user.disabled,
        totp_enabled=user.totp_enabled,
        version=user.version,
    )


async def session_out(
    session: AsyncSession, user: User, started: sessions.Started
) -> schemas.SessionOut:
    actor = await sessions.actor_of(session, user, started.session_id)
    me = await _me(session, actor)
    return schemas.SessionOut(
        **me.model_dump(), csrf_token=started.csrf_token, expires_at=iso(started.expires_at)
    )


async def own_user(session: AsyncSession, actor: Actor) -> User:
    if actor.user_id is None:
        raise AdminError(400, "the admin token has no account to change", "invalid_request")
    user = await repository.user_by_id(session, actor.user_id)
    if user is None:
        raise AdminError(401, "the account is gone", "authentication_error")
    return user


@router.post(
    "/login",
    responses=documented({429: "Too many failed sign-ins for the account or the address"}),
)
async def login(request: Request, body: schemas.LoginIn, response: Response) -> schemas.SessionOut:
    """Sign in. Every sign-in starts a new session with a new random id (a cookie the client
    already had is ended, never adopted) and answers its CSRF token."""
    admin = state(request)
    email = service.normalize_email(body.email)
    audit.note_sign_in(request, email, None)
    attempt = SignIn(
        email=email,
        password=body.password,
        totp_code=body.totp_code,
        recovery_code=body.recovery_code,
        ip=audit.client_ip(request),
        user_agent=request.headers.get("user-agent"),
        previous_token=sessions.presented_token(request),
        passkey=body.passkey,
        public_url=admin.accounts.public_url,
        engine=admin.database(),
    )
    async with session_factory(admin.database())() as session:
        try:
            user = await service.authenticate_user(
                session, admin.sessions, admin.passwords, admin.sealer, attempt
            )
        except SignInFailed:
            await session.rollback()  # a used recovery code or TOTP step is not kept...
            await service.record_failure(session, admin.sessions, email, attempt.ip)
            await session.commit()  # ...but the failure is, for throttling
            raise
        audit.note_sign_in(request, email, user.id)
        await service.end_session_of_token(session, attempt.previous_token)
        await repository.clear_failures(session, email)
        started = await sessions.start(
            session, admin.sessions, user.id, attempt.ip, attempt.user_agent
        )
        out = await session_out(session, user, started)
        await session.commit()
    sessions.set_cookie(response, admin.sessions, started)
    return out


@router.post("/logout", status_code=204)
async def logout(request: Request, actor: SignedIn, session: Session) -> Response:
    """End this session (the cookie is cleared too)."""
    audit.note(request, "auth.logout", "session", actor.session_id, None, None, None)
    await service.end_session_of_token(session, sessions.presented_token(request))
    await session.commit()
    response = Response(status_code=204)
    sessions.clear_cookie(response, state(request).sessions)
    return response


@router.get("/me")
async def me(actor: SignedIn, session: Session) -> schemas.MeOut:
    """Who is calling: the user and its memberships (or the admin token)."""
    return await _me(session, actor)


@router.post("/password")
async def change_password(
    request: Request,
    body: schemas.PasswordIn,
    actor: SignedIn,
    session: Session,
    response: Response,
) -> schemas.SessionOut:
    """Change my password: every session of mine ends at once, this one included; the answer
    carries a fresh session (cookie and CSRF token)."""
    admin = state(request)
    user = await own_user(session, actor)
    audit.note(
        request, "user.password_change", "user", user.id, {"password": 1}, {"password": 2}, None
    )
    started = await service.change_password(
        session,
        admin.sessions,
        admin.passwords,
        user,
        body.current_password,
        body.new_password,
        audit.client_ip(request),
        request.headers.get("user-agent"),
    )
    out = await session_out(session, user, started)
    await session.commit()
    sessions.set_cookie(response, admin.sessions, started)
    return out


@router.post("/totp/setup")
async def totp_setup(request: Request, actor: SignedIn, session: Session) -> schemas.TotpSetupOut:
    """A new TOTP secret and its otpauth:// URI (for a QR code); not in force until enabled."""
    user = await own_user(session, actor)
    audit.note(request, "user.totp_setup", "user", user.id, None, None, None)
    secret, uri = await service.totp_setup(state(request).secrets(), user)
    await session.commit()
    return schemas.TotpSetupOut(secret=secret, otpauth_uri=uri)


@router.post("/totp/enable")
async def totp_enable(
    request: Request, body: schemas.TotpCodeIn, actor: SignedIn, session: Session
) -> schemas.TotpEnabledOut:
    """Turn two-factor on with a current code; the recovery codes are shown this once."""
    user = await own_user(session, actor)
    audit.note(
        request,
        "user.totp_enable",
        "user",
        user.id,
        {"totp_enabled": False},
        {"totp_enabled": True},
        None,
    )
    codes = await service.totp_enable(session, state(request).secrets(), user, body.code)
    await session.commit()
    return schemas.TotpEnabledOut(recovery_codes=codes)


@router.post("/totp/disable", status_code=204)
async def totp_disable(
    request: Request, body: schemas.TotpDisableIn, actor: SignedIn, session: Session
) -> Response:
    """Turn two-factor off: needs the password and a current code (or a recovery code)."""
    user = await own_user(session, actor)
    audit.note(
        request,
        "user.totp_disable",
        "user",
        user.id,
        {"totp_enabled": True},
        {"totp_enabled": False},
        None,
    )
    admin = state(request)
    await service.totp_disable(
        session,
        admin.passwords,
        admin.secrets(),
        user,
        body.password,
        body.code,
        body.recovery_code,
    )
    await session.commit()
    return Response(status_code=204)

"""/api/admin/auth/passkeys*: a user's passkeys (list, register, rename, delete) and signing
in with one, password-less or as the second factor after a password. HTTP only: the
ceremonies' rules are in passkeys.py, sign-in's in service.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, authenticate
from llmrelay.admin.errors import AdminError, documented
from llmrelay.admin.identity import credentials, passkeys, repository, schemas, service, sessions
from llmrelay.admin.identity import passkey_repository as rows
from llmrelay.admin.identity.endpoints import iso, own_user, session_out
from llmrelay.admin.identity.passkey_schemas import (
    OptionsIn,
    PasskeyCreated,
    PasskeyIn,
    PasskeyList,
    PasskeyLoginIn,
    PasskeyOut,
    PasskeyRename,
)
from llmrelay.admin.identity.service import SignIn, SignInFailed
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.kit.problems import NotFound
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import User
from llmrelay.store.models_passkeys import Passkey
from llmrelay.store.types import utcnow

router = APIRouter(prefix="/auth/passkeys", tags=["auth"])

SignedIn = Annotated[Actor, Depends(authenticate)]
#: The refusals a ceremony's answer can get, for the OpenAPI document.
_REFUSALS = documented(
    {
        400: "Not a WebAuthn answer, or its challenge is unknown, used or expired",
        409: "LLMRELAY_PUBLIC_URL is not set (passkeys_unavailable)",
    }
)


def _out(passkey: Passkey) -> PasskeyOut:
    return PasskeyOut(
        id=passkey.id,
        name=passkey.name,
        created_at=iso(passkey.created_at),
        last_used_at=None if passkey.last_used_at is None else iso(passkey.last_used_at),
        transports=list(passkey.transports or ()),
    )


def _rp(request: Request) -> passkeys.RelyingParty:
    return passkeys.relying_party(state(request).accounts.public_url)


async def _own(session: AsyncSession, user: User, passkey_id: str) -> Passkey:
    found = await rows.one_of_user(session, user.id, passkey_id)
    if found is None:
        raise NotFound(f"no passkey {passkey_id!r} of yours")
    return found


@router.get("")
async def my_passkeys(actor: SignedIn, session: Session) -> PasskeyList:
    """My passkeys, oldest first."""
    user = await own_user(session, actor)
    return PasskeyList(data=[_out(p) for p in await rows.of_user(session, user.id)])


@router.post("/register/options", responses=_REFUSALS)
async def register_options(request: Request, actor: SignedIn, session: Session) -> dict[str, Any]:
    """The options for navigator.credentials.create() (PublicKeyCredentialCreationOptions as
    JSON); their challenge answers once, within 5 minutes."""
    user = await own_user(session, actor)
    audit.note(request, "user.passkey_options", "user", user.id, None, None, None)
    options = await passkeys.registration_options(session, _rp(request), user)
    await session.commit()
    return options


@router.post("", status_code=201, responses=_REFUSALS)
async def register(
    request: Request, body: PasskeyIn, actor: SignedIn, session: Session
) -> PasskeyCreated:
    """Keep a new passkey: what the browser answered to the options. From then on a password
    alone no longer signs in (the passkey, TOTP or a recovery code is asked for too); the
    first second factor of an account comes with its recovery codes."""
    user = await own_user(session, actor)
    audit.note(request, "user.passkey_register", "passkey", None, None, None, None)
    had = await service.has_second_factor(session, user)
    passkey = await passkeys.register(
        state(request).database(), session, _rp(request), user, body.credential, body.name
    )
    codes = None
    if not had:
        codes = credentials.new_recovery_codes()
        await repository.replace_recovery_codes(
            session, user.id, [credentials.digest(c) for c in codes]
        )
    after = {"name": passkey.name, "user_id": user.id}
    audit.note(request, "user.passkey_register", "passkey", passkey.id, None, after, None)
    await session.commit()
    return PasskeyCreated(**_out(passkey).model_dump(), recovery_codes=codes)


@router.patch("/{passkey_id}")
async def rename(
    request: Request, passkey_id: str, body: PasskeyRename, actor: SignedIn, session: Session
) -> PasskeyOut:
    """Rename one of my passkeys."""
    user = await own_user(session, actor)
    audit.note(request, "user.passkey_rename", "passkey", passkey_id, None, None, None)
    passkey = await _own(session, user, passkey_id)
    audit.note(
        request,
        "user.passkey_rename",
        "passkey",
        passkey.id,
        {"name": passkey.name},
        {"name": body.name.strip() or passkey.name},
        None,
    )
    passkey.name = body.name.strip() or passkey.name
    await session.commit()
    return _out(passkey)


@router.delete("/{passkey_id}", status_code=204)
async def delete(request: Request, passkey_id: str, actor: SignedIn, session: Session) -> Response:
    """Delete one of my passkeys: it signs in no more. Without passkeys and TOTP the account
    is back to its password alone (its recovery codes go too)."""
    user = await own_user(session, actor)
    audit.note(request, "user.passkey_delete", "passkey", passkey_id, None, None, None)
    passkey = await _own(session, user, passkey_id)
    audit.note(
        request, "user.passkey_delete", "passkey", passkey.id, {"name": passkey.name}, None, None
    )
    await session.delete(passkey)
    await session.flush()
    if not await service.has_second_factor(session, user):
        await repository.delete_recovery_codes(session, user.id)
    await session.commit()
    return Response(status_code=204)


@router.post(
    "/login/options",
    responses=documented(
        {
            401: "Wrong email or password (with them)",
            409: "No passkey on the account, or LLMRELAY_PUBLIC_URL is not set",
            429: "Too many failed sign-ins for the account or the address",
        }
    ),
)
async def login_options(request: Request, body: OptionsIn | None = None) -> dict[str, Any]:
    """The options for navigator.credentials.get() (PublicKeyCredentialRequestOptions as
    JSON). Without a body: a password-less sign-in with any passkey of this site (user
    verification required), answered to POST /auth/passkeys/login. With the email and
    password: the account's passkeys as its second factor, answered (as `passkey`) to
    POST /auth/login with the same email and password."""
    admin = state(request)
    rp = _rp(request)
    asked = body or OptionsIn()
    purpose = {"purpose": passkeys.LOGIN if asked.email is None else passkeys.SECOND}
    audit.note_anonymous(request, "auth.passkey_options", "user", None, asked.email, purpose)
    if (asked.email is None) != (asked.password is None):
        raise AdminError(400, "email and password: both, or neither", field="password")
    async with session_factory(admin.database())() as session:
        user = None
        if asked.email is not None and asked.password is not None:
            attempt = SignIn(
                email=service.normalize_email(asked.email),
                password=asked.password,
                totp_code=None,
                recovery_code=None,
                ip=audit.client_ip(request),
                user_agent=request.headers.get("user-agent"),
                previous_token=None,
            )
            try:
                user = await service.password_user(
                    session, admin.sessions, admin.passwords, attempt
                )
            except SignInFailed:
                await session.rollback()
                await service.record_failure(session, admin.sessions, attempt.email, attempt.ip)
                await session.commit()
                raise
        options = await passkeys.authentication_options(session, rp, user)
        await session.commit()
    return options


@router.post(
    "/login",
    responses=documented(
        {
            400: "Not a WebAuthn answer, or its challenge is unknown, used or expired",
            401: "Unknown passkey, bad signature or origin, or a counter that went backwards",
            409: "LLMRELAY_PUBLIC_URL is not set (passkeys_unavailable)",
            429: "Too many failed sign-ins from the address",
        }
    ),
)
async def login(request: Request, body: PasskeyLoginIn, response: Response) -> schemas.SessionOut:
    """Sign in without a password: the answer of a passkey (which verified its user) to the
    options of POST /auth/passkeys/login/options without a body. A new session, as
    POST /auth/login starts."""
    admin = state(request)
    rp = _rp(request)
    ip = audit.client_ip(request)
    audit.note_sign_in(request, "", None, "auth.passkey_login")
    engine = admin.database()
    async with session_factory(engine)() as session:
        await service.check_throttle(session, admin.sessions, None, ip, utcnow())
        try:
            passkey = await passkeys.authenticate(engine, session, rp, body.credential, None)
        except passkeys.PasskeyRefused:
            await session.rollback()
            await service.record_failure(session, admin.sessions, "", ip)
            await session.commit()
            raise
        user = await repository.user_by_id(session, passkey.user_id)
        if user is None:
            raise passkeys.PasskeyRefused("credential: unknown passkey")
        audit.note_sign_in(request, user.email, user.id, "auth.passkey_login")
        service.check_active(user)
        previous = sessions.presented_token(request)
        await service.end_session_of_token(session, previous)
        started = await sessions.start(
            session, admin.sessions, user.id, ip, request.headers.get("user-agent")
        )
        out = await session_out(session, user, started)
        await session.commit()
    sessions.set_cookie(response, admin.sessions, started)
    return out

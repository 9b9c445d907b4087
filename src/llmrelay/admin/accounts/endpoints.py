"""/api/admin/invitations and the public account routes under /api/admin/auth: accept an
invitation, ask for and use a password reset, verify an address (and, signed in, ask for a
verification link). HTTP only: the rules are in service.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, authenticate, require
from llmrelay.admin.accounts import mails, service
from llmrelay.admin.accounts.schemas import (
    AcceptedOut,
    AcceptIn,
    AccountOut,
    InvitationIn,
    InvitationOut,
    ResetIn,
    ResetRequestIn,
    TokenIn,
    VerificationSentOut,
)
from llmrelay.admin.errors import AdminError, documented
from llmrelay.admin.identity import repository
from llmrelay.admin.identity.credentials import normalize_email
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.versions import commit

router = APIRouter(tags=["accounts"])
Writer = Annotated[Actor, Depends(require("users:write"))]
SignedIn = Annotated[Actor, Depends(authenticate)]

#: What a password-reset request answers, whatever the address.
RESET_REQUESTED = (
    "if an active account has this address, a link to reset its password was mailed to it"
)


@router.post("/invitations", status_code=201)
async def invite(
    request: Request, session: Session, actor: Writer, body: InvitationIn
) -> InvitationOut:
    """Invite someone to a tenant with a role (or, platform admins, as a platform admin). A new
    address gets a pending account and a link to choose its password; an existing account
    joins the tenant at once and is told by mail."""
    admin = state(request)
    audit.note(request, "user.invite", "user", None, None, None, body.tenant_id)
    invited = await service.invite(
        session,
        admin.passwords,
        admin.secrets(),
        admin.accounts,
        mails.base_url(admin.accounts, request),
        actor,
        body,
    )
    membership = invited.membership
    out = InvitationOut(
        id=invited.user.id,
        email=invited.user.email,
        pending=invited.user.pending,
        platform_admin=invited.user.platform_admin,
        tenant_id=membership.tenant_id if membership else None,
        role=membership.role if membership else None,
        expires_at=invited.expires_at,
        mail="queued" if admin.accounts.mail_configured else "no_smtp",
    )
    after = out.model_dump(mode="json", exclude={"id", "expires_at", "mail"})
    audit.note(request, "user.invite", "user", out.id, None, after, out.tenant_id)
    await commit(session)
    return out


@router.post("/auth/invitation/accept")
async def accept_invitation(request: Request, session: Session, body: AcceptIn) -> AccountOut:
    """Choose the password of an invited account with the token from its mail: the account
    is active from now on (sign in with POST /auth/login; this does not sign in)."""
    audit.note_anonymous(request, "user.accept_invitation", "user", None, None, None)
    user = await service.accept_invitation(
        session, state(request).passwords, body.token, body.password, body.name
    )
    audit.note_anonymous(
        request,
        "user.accept_invitation",
        "user",
        user.id,
        user.email,
        {"pending": False, "password": "set"},
    )
    await commit(session)
    return AccountOut(email=user.email)


@router.post(
    "/auth/password-reset",
    status_code=202,
    responses=documented({429: "Too many reset requests for the address or from the client"}),
)
async def request_password_reset(
    request: Request, session: Session, body: ResetRequestIn
) -> AcceptedOut:
    """Ask for a password-reset link. The answer is the same whether or not an account has
    the address; only an existing, enabled account gets a mail."""
    admin = state(request)
    email = normalize_email(body.email)
    audit.note_anonymous(request, "user.password_reset_request", "user", None, email, None)
    user = await service.request_password_reset(
        session,
        admin.secrets(),
        admin.accounts,
        mails.base_url(admin.accounts, request),
        body.email,
        audit.client_ip(request),
    )
    audit.note_anonymous(
        request,
        "user.password_reset_request",
        "user",
        user.id if user else None,
        email,
        None,
    )
    await commit(session)
    return AcceptedOut(message=RESET_REQUESTED)


@router.post("/auth/password-reset/confirm")
async def reset_password(request: Request, session: Session, body: ResetIn) -> AccountOut:
    """Set a new password with the token from a reset mail: every session of the account
    ends; sign in again with the new password (this does not sign in)."""
    audit.note_anonymous(request, "user.password_reset", "user", None, None, None)
    user = await service.reset_password(
        session, state(request).passwords, body.token, body.password
    )
    audit.note_anonymous(
        request, "user.password_reset", "user", user.id, user.email, {"password": "set"}
    )
    await commit(session)
    return AccountOut(email=user.email)


@router.post("/auth/verify-email")
async def verify_email(request: Request, session: Session, body: TokenIn) -> AccountOut:
    """Confirm an address with the token from a verification mail; a signed-up account is
    active from now on."""
    audit.note_anonymous(request, "user.verify_email", "user", None, None, None)
    user = await service.verify_email(session, body.token)
    audit.note_anonymous(
        request,
        "user.verify_email",
        "user",
        user.id,
        user.email,
        {"email_verified": True, "pending": False},
    )
    await commit(session)
    return AccountOut(email=user.email)


@router.post(
    "/auth/verify-email/send",
    status_code=202,
    responses=documented({429: "Too many verification mails for the address"}),
)
async def send_verification(
    request: Request, session: Session, actor: SignedIn
) -> VerificationSentOut:
    """Mail a verification link to my own address (alerts go to verified addresses only)."""
    if actor.user_id is None:
        raise AdminError(400, "the admin token has no account to verify", "invalid_request")
    user = await repository.user_by_id(session, actor.user_id)
    if user is None:
        raise AdminError(401, "the account is gone", "authentication_error")
    admin = state(request)
    audit.note(request, "user.verification_sent", "user", user.id, None, None, None)
    issued = await service.send_verification(
        session,
        admin.secrets(),
        admin.accounts,
        mails.base_url(admin.accounts, request),
        user,
        audit.client_ip(request),
    )
    await commit(session)
    return VerificationSentOut(email=user.email, expires_at=issued.expires_at)

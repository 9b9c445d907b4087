"""POST /api/admin/signup: HTTP only; the rules are in service.py."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy.exc import IntegrityError

from llmrelay.admin import audit
from llmrelay.admin.access import require
from llmrelay.admin.accounts import mails
from llmrelay.admin.errors import documented
from llmrelay.admin.identity.credentials import normalize_email
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.kit.problems import Conflict
from llmrelay.admin.signup import service
from llmrelay.admin.signup.schemas import SignupIn, SignupOut, SignupSettingsOut
from llmrelay.store.bootstrap import bump_generation

router = APIRouter(tags=["signup"])


@router.get("/settings/signup", dependencies=[Depends(require("tenants:read"))])
async def signup_settings(request: Request) -> SignupSettingsOut:
    """Self-service sign-up as the environment sets it (read only)."""
    policy = state(request).accounts
    return SignupSettingsOut(
        enabled=policy.signup_enabled,
        prepaid=policy.signup_prepaid,
        free_credit_usd=policy.signup_free_credit_micros / 1_000_000,
        max_per_ip=policy.signup_max_per_ip,
        window_s=policy.signup_window_s,
        mail_configured=policy.mail_configured,
        public_url=policy.public_url,
        verification_ttl_s=policy.verification_ttl_s,
    )


@router.post(
    "/signup",
    status_code=201,
    responses=documented(
        {
            403: "Self-service sign-up is not enabled (LLMRELAY_SIGNUP_ENABLED)",
            429: "Too many sign-ups from the client's address",
        }
    ),
)
async def sign_up(request: Request, session: Session, body: SignupIn) -> SignupOut:
    """Create a tenant with its default project and wallet, and a pending account as its
    tenant admin; a link to confirm the address is mailed, and the account signs in once it
    is used (POST /auth/verify-email). No credentials needed."""
    admin = state(request)
    email = normalize_email(body.email)
    audit.note_anonymous(request, "tenant.signup", "tenant", None, email, None)
    await service.count_attempt(session, admin.accounts, audit.client_ip(request))
    await session.commit()  # the attempt counts, whatever happens next
    made = await service.sign_up(
        session,
        admin.passwords,
        admin.secrets(),
        admin.accounts,
        mails.base_url(admin.accounts, request),
        body,
    )
    out = SignupOut(
        id=made.tenant.id,
        slug=made.tenant.slug,
        name=made.tenant.name,
        project_id=made.project.id,
        user_id=made.user.id,
        email=made.user.email,
        pending=True,
        prepaid=made.prepaid,
        balance_usd=made.balance_micros / 1_000_000,
        message=f"a link to confirm the address was mailed to {made.user.email}: "
        "the account signs in once it is used",
    )
    after = out.model_dump(mode="json", exclude={"message", "id"})
    audit.note_anonymous(request, "tenant.signup", "tenant", out.id, email, after, out.id)
    generation = await bump_generation(session)  # a new tenant and project: replicas follow
    try:
        await session.commit()
    except IntegrityError:  # a concurrent sign-up took the address or the slug
        raise Conflict(service.EMAIL_TAKEN, "email") from None
    if admin.publisher is not None:
        await admin.publisher.publish(generation)
    return out

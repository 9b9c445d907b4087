"""The rules of self-service sign-up. One transaction makes the tenant (a unique slug from its
name), its `default` project, its wallet (prepaid unless LLMRELAY_SIGNUP_PREPAID=false, with
the free credit as a ledger adjustment), a pending account as its tenant admin, a
verification token and its mail: any failure rolls all of it back, nothing half made. The
account signs in once the mailed link verified its address.

The throttle's attempt is counted in a transaction of its own, before (`count_attempt`), so
that refused sign-ups (a taken address, a weak password) count too: probing addresses costs
the same as signing up."""

from __future__ import annotations

import re
import secrets
import unicodedata
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Role
from llmrelay.admin.accounts import mails, throttle, tokens
from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity.credentials import Passwords
from llmrelay.admin.identity.service import check_password, normalize_email
from llmrelay.admin.kit.problems import Conflict
from llmrelay.admin.signup.schemas import SignupIn
from llmrelay.admin.state import AccountPolicy
from llmrelay.billing import ledger
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import DEFAULT_TENANT_SLUG, Project, Tenant
from llmrelay.store.models_access import Membership, User

DEFAULT_PROJECT = "default"
#: Said when the address has an account: no more than the 409 itself tells.
EMAIL_TAKEN = (
    "email: this address cannot sign up: if it is yours, sign in, or ask for a password reset"
)
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True, slots=True)
class SignedUp:
    tenant: Tenant
    project: Project
    user: User
    prepaid: bool
    balance_micros: int


def disabled() -> AdminError:
    return AdminError(
        403,
        "self-service sign-up is not enabled on this gateway (LLMRELAY_SIGNUP_ENABLED)",
        "signup_disabled",
    )


def slug_of(name: str) -> str:
    """Lower-case ASCII letters, digits and dashes from the name ("Acme Café" -> acme-cafe)."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return _NOT_SLUG.sub("-", ascii_name.lower()).strip("-")[:40].strip("-") or "tenant"


async def _unique_slug(session: AsyncSession, name: str) -> str:
    """The name's slug, else with a random suffix. Never `default` itself, even before the
    default tenant exists: that slug is where the declarative config and the admin token's
    creates go (store/bootstrap.ensure_default_tenant), never a signed-up tenant."""
    base = slug_of(name)
    candidates = [] if base == DEFAULT_TENANT_SLUG else [base]
    candidates += [f"{base}-{secrets.token_hex(3)}" for _ in range(5)]
    for candidate in candidates:
        if await session.scalar(select(Tenant.id).where(Tenant.slug == candidate)) is None:
            return candidate
    raise Conflict("tenant_name: no free slug for this name: choose another", "tenant_name")


async def count_attempt(session: AsyncSession, policy: AccountPolicy, ip: str | None) -> None:
    if not policy.signup_enabled:
        raise disabled()
    await throttle.attempt(
        session,
        throttle.SIGNUP,
        what="sign-ups",
        window_s=policy.signup_window_s,
        ip=ip,
        per_ip=policy.signup_max_per_ip,
    )


async def sign_up(
    session: AsyncSession,
    passwords: Passwords,
    sealer: Sealer,
    policy: AccountPolicy,
    base: str,
    data: SignupIn,
) -> SignedUp:
    if not policy.signup_enabled:
        raise disabled()
    check_password(data.password, "password")
    email = normalize_email(data.email)
    if await session.scalar(select(User.id).where(User.email == email)) is not None:
        raise Conflict(EMAIL_TAKEN, "email")
    tenant = Tenant(slug=await _unique_slug(session, data.tenant_name), name=data.tenant_name)
    session.add(tenant)
    await session.flush()
    project = Project(tenant_id=tenant.id, name=DEFAULT_PROJECT)
    session.add(project)
    user = User(
        email=email, name=data.name, password_hash=passwords.hash(data.password), pending=True
    )
    session.add(user)
    try:
        await session.flush()
    except IntegrityError:  # the same address signed up at the same moment
        raise Conflict(EMAIL_TAKEN, "email") from None
    session.add(Membership(user_id=user.id, tenant_id=tenant.id, role=Role.TENANT_ADMIN.value))
    await session.flush()
    connection = await session.connection()  # the same transaction, for the ledger's SQL
    await ledger.ensure_wallet(connection, tenant.id, prepaid=policy.signup_prepaid)
    balance = 0
    if policy.signup_free_credit_micros > 0:
        moved = await ledger.credit(
            connection,
            tenant.id,
            policy.signup_free_credit_micros,
            kind="adjustment",
            key=f"signup_credit:{tenant.id}",
            actor="signup",
            note="free credit at sign-up (LLMRELAY_SIGNUP_FREE_CREDIT_USD)",
        )
        balance = moved.balance_micros
    issued = await tokens.issue(session, user.id, tokens.VERIFICATION, policy.verification_ttl_s)
    await mails.verification(
        session,
        sealer,
        base=base,
        to=email,
        token=issued.token,
        expires_at=issued.expires_at,
        purpose=f" and activate your account, the administrator of {tenant.name}",
        tenant_id=tenant.id,
    )
    return SignedUp(tenant, project, user, policy.signup_prepaid, balance)

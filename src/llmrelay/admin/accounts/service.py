"""The rules of invitations, email verification and password resets. Functions take the
request's database session and never commit (the endpoint does, once); every mail is queued
in that same transaction (mail/outbox.py), so a refused change sends nothing.

- An invitation of a new address creates the account *pending* (no usable password; sign-in
  refused) with its membership, and mails a link; accepting it sets the password and
  activates the account. An existing account gets the membership at once and a notice.
  Inviting a pending account again replaces its link.
- A password-reset request answers the same whatever the address; an active or pending
  account (not a disabled one) gets a link. Using it sets the password, ends every session
  of the account and, since the link proved the address, verifies it (and activates a
  pending account).
- Verifying an address activates a pending (signed-up) account.
Neither accepting nor resetting signs in: the client signs in next, with two-factor when
the account has it (a mailed link alone never gets past it).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor, Role
from llmrelay.admin.accounts import mails, throttle, tokens
from llmrelay.admin.accounts.schemas import InvitationIn
from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity import repository as identity
from llmrelay.admin.identity.credentials import Passwords
from llmrelay.admin.identity.service import check_password, normalize_email
from llmrelay.admin.kit.problems import Conflict, Invalid, NotFound
from llmrelay.admin.state import AccountPolicy
from llmrelay.admin.users import repository as users
from llmrelay.admin.users.service import check_projects
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import Tenant
from llmrelay.store.models_access import Membership, User
from llmrelay.store.types import utcnow

WRITE = "users:write"


@dataclass(frozen=True, slots=True)
class Invited:
    user: User
    membership: Membership | None
    #: The invitation link's expiry; None when the account existed (only told).
    expires_at: datetime | None


def unusable_password(passwords: Passwords) -> str:
    """The hash a pending account holds until its owner chooses a password: of a random
    value nobody knows (a real argon2 hash, so signing in costs the same as for any account)."""
    return passwords.hash(secrets.token_urlsafe(32))


def _inviter(actor: Actor) -> str:
    return actor.email or "An administrator"


async def _tenant_for(session: AsyncSession, actor: Actor, data: InvitationIn) -> Tenant | None:
    tenant_id = data.tenant_id
    if tenant_id is None and not actor.platform_admin:
        writable = actor.tenants_for(WRITE) or frozenset()
        if len(writable) != 1:
            raise Invalid("tenant_id: say which tenant the user joins", "tenant_id")
        tenant_id = next(iter(writable))
    if tenant_id is None:
        if not data.platform_admin:
            raise Invalid("tenant_id: say which tenant the user joins", "tenant_id")
        return None
    actor.ensure(WRITE, tenant_id)
    tenant = await session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound(f"tenant_id: no tenant {tenant_id!r}", "tenant_id")
    if data.role is None:
        raise Invalid("role: the user's role in the tenant is required", "role")
    if data.role is Role.PLATFORM_ADMIN:
        raise Invalid(
            "role: platform_admin is an account flag, not a tenant role: send "
            '"platform_admin": true',
            "role",
        )
    return tenant


async def invite(
    session: AsyncSession,
    passwords: Passwords,
    sealer: Sealer,
    policy: AccountPolicy,
    base: str,
    actor: Actor,
    data: InvitationIn,
) -> Invited:
    if data.platform_admin and not actor.platform_admin:
        raise AdminError(
            403, "only a platform admin can invite a platform admin", "permission_error"
        )
    tenant = await _tenant_for(session, actor, data)
    email = normalize_email(data.email)
    user = await users.by_email(session, email)
    if user is None:
        user = User(
            email=email,
            name=data.name,
            password_hash=unusable_password(passwords),
            platform_admin=data.platform_admin,
            pending=True,
        )
        session.add(user)
        await session.flush()
    elif user.disabled:
        raise Conflict("email: this account is disabled: enable it before inviting it", "email")
    elif data.platform_admin and not user.platform_admin:
        user.platform_admin = True
    elif tenant is None and not user.pending:
        raise Conflict("email: this account is a platform admin already", "email")
    membership = None
    if tenant is not None:
        assert data.role is not None
        membership = await users.membership(session, tenant.id, user.id)
        if membership is not None and not user.pending:
            raise Conflict("email: this account is a member of the tenant already", "email")
        if membership is None:
            membership = Membership(
                user_id=user.id,
                tenant_id=tenant.id,
                role=data.role.value,
                project_ids=await check_projects(session, tenant.id, data.project_ids),
            )
            session.add(membership)
            await session.flush()
    where = tenant.name if tenant is not None else "the whole gateway"
    role = membership.role if membership is not None else "platform admin"
    tenant_id = tenant.id if tenant is not None else None
    if not user.pending:
        await mails.membership(
            session,
            sealer,
            base=base,
            to=user.email,
            inviter=_inviter(actor),
            tenant=where,
            role=role,
            tenant_id=tenant_id,
        )
        return Invited(user, membership, None)
    await tokens.retire(session, user.id, tokens.INVITATION)
    issued = await tokens.issue(
        session,
        user.id,
        tokens.INVITATION,
        policy.invitation_ttl_s,
        {"tenant_id": tenant_id, "role": role, "invited_by": actor.user_id},
    )
    await mails.invitation(
        session,
        sealer,
        base=base,
        to=user.email,
        token=issued.token,
        expires_at=issued.expires_at,
        inviter=_inviter(actor),
        tenant=where,
        role=role,
        tenant_id=tenant_id,
    )
    return Invited(user, membership, issued.expires_at)


async def _user_of(session: AsyncSession, used: tokens.Used) -> User:
    user = await identity.user_by_id(session, used.user_id)
    if user is None or user.disabled:
        raise tokens.InvalidToken()
    return user


def _activate(user: User) -> None:
    """The link proved the address: verified, and a pending account becomes active."""
    if user.email_verified_at is None:
        user.email_verified_at = utcnow()
    user.pending = False


async def accept_invitation(
    session: AsyncSession, passwords: Passwords, token: str, password: str, name: str | None
) -> User:
    check_password(password, "password")  # before the token is spent on a refused password
    user = await _user_of(session, await tokens.use(session, token, tokens.INVITATION))
    user.password_hash = passwords.hash(password)
    user.password_changed_at = utcnow()
    user.password_change_required = False  # chosen by the user, not an admin
    if name is not None:
        user.name = name
    _activate(user)
    await tokens.retire(session, user.id, tokens.INVITATION)
    return user


async def request_password_reset(
    session: AsyncSession,
    sealer: Sealer,
    policy: AccountPolicy,
    base: str,
    email: str,
    ip: str | None,
) -> User | None:
    """Mail a reset link to the account, if there is one that may have it; the account (for
    the audit log only: the answer never tells)."""
    email = normalize_email(email)
    await throttle.attempt(
        session,
        throttle.PASSWORD_RESET,
        what="password-reset requests",
        window_s=policy.reset_window_s,
        ip=ip,
        per_ip=policy.reset_max_per_ip,
        email=email,
        per_account=policy.reset_max_per_account,
    )
    user = await users.by_email(session, email)
    if user is None or user.disabled:
        return None
    await tokens.retire(session, user.id, tokens.PASSWORD_RESET)
    issued = await tokens.issue(
        session, user.id, tokens.PASSWORD_RESET, policy.password_reset_ttl_s
    )
    await mails.password_reset(
        session, sealer, base=base, to=user.email, token=issued.token, expires_at=issued.expires_at
    )
    return user


async def reset_password(
    session: AsyncSession, passwords: Passwords, token: str, password: str
) -> User:
    check_password(password, "password")
    user = await _user_of(session, await tokens.use(session, token, tokens.PASSWORD_RESET))
    now = utcnow()
    user.password_hash = passwords.hash(password)
    user.password_changed_at = now
    user.password_change_required = False  # chosen by the user through the mailed link
    _activate(user)
    await tokens.retire(session, user.id, tokens.PASSWORD_RESET)
    await identity.revoke_sessions_of(session, user.id, now)
    await identity.clear_failures(session, user.email)  # the new password lifts the throttle
    return user


async def verify_email(session: AsyncSession, token: str) -> User:
    user = await _user_of(session, await tokens.use(session, token, tokens.VERIFICATION))
    _activate(user)
    await tokens.retire(session, user.id, tokens.VERIFICATION)
    return user


async def send_verification(
    session: AsyncSession,
    sealer: Sealer,
    policy: AccountPolicy,
    base: str,
    user: User,
    ip: str | None,
) -> tokens.Issued:
    """A verification link for a signed-in user's own address (alerts go only to verified
    addresses). Throttled per address like reset requests."""
    if user.email_verified_at is not None:
        raise Conflict("the address of this account is verified already")
    await throttle.attempt(
        session,
        throttle.VERIFICATION,
        what="verification mails",
        window_s=policy.reset_window_s,
        ip=ip,
        per_ip=None,
        email=user.email,
        per_account=policy.reset_max_per_account,
    )
    await tokens.retire(session, user.id, tokens.VERIFICATION)
    issued = await tokens.issue(session, user.id, tokens.VERIFICATION, policy.verification_ttl_s)
    await mails.verification(
        session,
        sealer,
        base=base,
        to=user.email,
        token=issued.token,
        expires_at=issued.expires_at,
    )
    return issued

"""The rules of pending invitations. A caller sees and acts on the invitations of the tenants
where it holds the permission (a platform admin: all, those of platform admins included).
Resending is inviting again (admin.accounts.service.invite: a new link, the old one stops);
revoking retires the links, removes the membership the invitation made and, when the pending
account then belongs nowhere, the account itself. Never commits."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor, Role
from llmrelay.admin.accounts import service as accounts
from llmrelay.admin.accounts import tokens
from llmrelay.admin.accounts.schemas import InvitationIn
from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity.credentials import Passwords
from llmrelay.admin.invitations import repository
from llmrelay.admin.invitations.schemas import PendingInvitationOut
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.state import AccountPolicy
from llmrelay.store.crypto import Sealer
from llmrelay.store.models_access import User
from llmrelay.store.models_billing import AccountToken
from llmrelay.store.types import utcnow


def _visible(actor: Actor, permission: str, tenant_id: str | None) -> bool:
    if actor.platform_admin:
        return True
    return tenant_id is not None and actor.can(permission, tenant_id)


async def page(session: AsyncSession, actor: Actor) -> list[PendingInvitationOut]:
    now = utcnow()
    rows = [
        (user, token)
        for user, token in await repository.pending(session)
        if _visible(actor, "users:read", token.data.get("tenant_id"))
    ]
    mails = await repository.latest_mails(session, [user.email for user, _ in rows])
    found = []
    for user, token in rows:
        mail = mails.get(user.email)
        found.append(
            PendingInvitationOut(
                user_id=user.id,
                email=user.email,
                name=user.name,
                tenant_id=token.data.get("tenant_id"),
                role=token.data.get("role"),
                expires_at=token.expires_at,
                expired=token.expires_at <= now,
                created_at=token.created_at,
                mail_status=mail.status if mail is not None else None,
                mail_error=mail.last_error if mail is not None else None,
            )
        )
    return found


async def _invitation(
    session: AsyncSession, actor: Actor, user_id: str
) -> tuple[User, AccountToken]:
    user = await session.get(User, user_id)
    token = await repository.latest_token(session, user_id) if user is not None else None
    if user is None or token is None or not user.pending:
        raise NotFound(f"no pending invitation for user {user_id!r}")
    tenant_id = token.data.get("tenant_id")
    if not _visible(actor, "users:read", tenant_id):
        raise NotFound(f"no pending invitation for user {user_id!r}")
    if tenant_id is None and not actor.platform_admin:
        raise AdminError(403, "only a platform admin acts on this invitation", "permission_error")
    if tenant_id is not None:
        actor.ensure("users:write", tenant_id)
    return user, token


async def resend(
    session: AsyncSession,
    passwords: Passwords,
    sealer: Sealer,
    policy: AccountPolicy,
    base: str,
    actor: Actor,
    user_id: str,
) -> accounts.Invited:
    user, token = await _invitation(session, actor, user_id)
    role = token.data.get("role")
    again = InvitationIn(
        email=user.email,
        name=user.name,
        tenant_id=token.data.get("tenant_id"),
        role=Role(role) if role and role != "platform admin" else None,
        platform_admin=user.platform_admin and token.data.get("tenant_id") is None,
    )
    return await accounts.invite(session, passwords, sealer, policy, base, actor, again)


async def revoke(session: AsyncSession, actor: Actor, user_id: str) -> tuple[User, str | None]:
    """The links stop working; the membership goes; an account left in no tenant (and not a
    platform admin) is deleted."""
    user, token = await _invitation(session, actor, user_id)
    await tokens.retire(session, user.id, tokens.INVITATION)
    tenant_id = token.data.get("tenant_id")
    if tenant_id is not None:
        await repository.remove_membership(session, user.id, tenant_id)
    if not await repository.has_memberships(session, user.id) and (
        tenant_id is not None or not user.platform_admin
    ):
        await session.delete(user)
    elif tenant_id is None:
        user.platform_admin = False
    await session.flush()
    return user, tenant_id

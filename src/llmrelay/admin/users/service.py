"""The rules of accounts and memberships. An account spans tenants, so changing one (name,
disabled) needs users:write in every tenant it belongs to, and only a platform admin touches
platform admins or the platform-admin flag. Removing a member or disabling a user ends the
user's sessions in the same transaction. Flushes, never commits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor, Role
from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity import repository as identity
from llmrelay.admin.identity.credentials import Passwords
from llmrelay.admin.identity.service import check_password, normalize_email
from llmrelay.admin.kit.problems import Conflict, Invalid, NotFound
from llmrelay.admin.users import repository
from llmrelay.admin.users.schemas import MemberIn, MemberPatch, UserIn, UserPatch
from llmrelay.store.models_access import Membership, User
from llmrelay.store.types import utcnow

WRITE = "users:write"


def _platform_only(what: str) -> AdminError:
    return AdminError(403, f"only a platform admin can {what}", "permission_error")


def _member_role(role: Role) -> str:
    if role is Role.PLATFORM_ADMIN:
        raise Invalid("role: platform_admin is an account flag, not a tenant role", "role")
    return role.value


async def check_projects(
    session: AsyncSession, tenant_id: str, project_ids: list[str] | None
) -> list[str] | None:
    """A project limit names projects of the tenant (another tenant's ids are unknown)."""
    if project_ids is None:
        return None
    known = await repository.project_ids_of(session, tenant_id)
    for n, project_id in enumerate(project_ids):
        if project_id not in known:
            raise Invalid(f"project_ids[{n}]: no project {project_id!r}", f"project_ids[{n}]")
    return sorted(set(project_ids))


async def create_user(
    session: AsyncSession, passwords: Passwords, actor: Actor, data: UserIn
) -> tuple[User, Membership | None]:
    if data.platform_admin and not actor.platform_admin:
        raise _platform_only("create a platform admin")
    tenant_id = data.tenant_id
    if tenant_id is None and not actor.platform_admin:
        writable = actor.tenants_for(WRITE) or frozenset()
        if len(writable) != 1:
            raise Invalid("tenant_id: say which tenant the user joins", "tenant_id")
        tenant_id = next(iter(writable))
    if tenant_id is not None:
        actor.ensure(WRITE, tenant_id)
        if data.role is None:
            raise Invalid("role: the user's role in the tenant is required", "role")
    check_password(data.password, "password")
    email = normalize_email(data.email)
    if await repository.by_email(session, email) is not None:
        raise Conflict(
            "email: an account with this email exists: add it with POST /tenants/{id}/members",
            "email",
        )
    user = User(
        email=email,
        name=data.name,
        password_hash=passwords.hash(data.password),
        platform_admin=data.platform_admin,
        password_change_required=True,  # the admin knows it: temporary
    )
    session.add(user)
    await session.flush()
    membership = None
    if tenant_id is not None and data.role is not None:
        membership = Membership(
            user_id=user.id,
            tenant_id=tenant_id,
            role=_member_role(data.role),
            project_ids=await check_projects(session, tenant_id, data.project_ids),
        )
        session.add(membership)
        await session.flush()
    return user, membership


def visible_memberships(actor: Actor, rows: Sequence[Membership]) -> list[Membership]:
    return [m for m in rows if actor.can("users:read", m.tenant_id)]


async def load_user(session: AsyncSession, actor: Actor, permission: str, user_id: str) -> User:
    """The user, or 404 unless the caller holds `permission` in one of its tenants (or is a
    platform admin; a user is always visible to itself)."""
    user = await repository.get(session, user_id)
    if user is None:
        raise NotFound(f"no user {user_id!r}")
    if actor.platform_admin or actor.user_id == user.id:
        return user
    tenants = [m.tenant_id for m in await repository.memberships_of(session, user.id)]
    if not any(actor.can(permission, t) for t in tenants):
        if any(t in actor.roles for t in tenants):
            actor.ensure(permission, next(t for t in tenants if t in actor.roles))
        raise NotFound(f"no user {user_id!r}")
    return user


async def check_may_edit(session: AsyncSession, actor: Actor, user: User) -> None:
    """An account spans tenants: editing it (or ending its sessions) needs users:write in
    every tenant it belongs to, and a platform admin's only another platform admin."""
    if actor.platform_admin:
        return
    if user.platform_admin:
        raise _platform_only("change a platform admin")
    for m in await repository.memberships_of(session, user.id):
        if not actor.can(WRITE, m.tenant_id):
            raise AdminError(
                403,
                "the user belongs to tenants you do not administer: ask a platform admin",
                "permission_error",
            )


async def update_user(
    session: AsyncSession, actor: Actor, user: User, data: UserPatch
) -> list[str]:
    """Apply the fields sent; the names of those that changed. Disabling ends every session."""
    if data.platform_admin is not None and not actor.platform_admin:
        raise _platform_only("change a platform admin")
    await check_may_edit(session, actor, user)
    if data.disabled and user.id == actor.user_id:
        raise Invalid("disabled: you cannot disable your own account", "disabled")
    changed = []
    for name in ("name", "disabled", "platform_admin"):
        value = getattr(data, name)
        if value is not None and getattr(user, name) != value:
            setattr(user, name, value)
            changed.append(name)
    if "disabled" in changed and user.disabled:
        await identity.revoke_sessions_of(session, user.id, utcnow())
    return changed


async def add_member(session: AsyncSession, tenant_id: str, data: MemberIn) -> Membership:
    if (data.user_id is None) == (data.email is None):
        raise Invalid("user_id: give user_id or email", "user_id")
    if data.user_id is not None:
        user = await repository.get(session, data.user_id)
    else:
        user = await repository.by_email(session, normalize_email(data.email or ""))
    if user is None:
        field = "user_id" if data.user_id is not None else "email"
        raise NotFound(f"{field}: no such user", field)
    if await repository.membership(session, tenant_id, user.id) is not None:
        raise Conflict("user_id: already a member of this tenant", "user_id")
    row = Membership(
        user_id=user.id,
        tenant_id=tenant_id,
        role=_member_role(data.role),
        project_ids=await check_projects(session, tenant_id, data.project_ids),
    )
    session.add(row)
    await session.flush()
    return row


async def update_member(session: AsyncSession, row: Membership, data: MemberPatch) -> list[str]:
    changed = []
    if data.role is not None and row.role != _member_role(data.role):
        row.role = data.role.value
        changed.append("role")
    if data.all_projects and data.project_ids is not None:
        raise Invalid("all_projects: give project_ids or all_projects, not both", "all_projects")
    projects = None if data.all_projects else data.project_ids
    if data.all_projects or data.project_ids is not None:
        projects = await check_projects(session, row.tenant_id, projects)
        if row.project_ids != projects:
            row.project_ids = projects
            changed.append("project_ids")
    return changed


async def remove_member(session: AsyncSession, row: Membership) -> None:
    """Remove the membership and end the user's sessions at once (every session: they may
    hold pages of this tenant open; the next request signs in again with what is left)."""
    await session.delete(row)
    await identity.revoke_sessions_of(session, row.user_id, utcnow())


async def set_temporary_password(
    session: AsyncSession, passwords: Passwords, actor: Actor, user: User, password: str
) -> None:
    """An admin's reset: a password the user must change at its next sign-in. Every session
    of the user ends (whoever held one must sign in with the new password)."""
    await check_may_edit(session, actor, user)
    if user.id == actor.user_id:
        raise Invalid("user_id: change your own password with POST /auth/password", "user_id")
    check_password(password, "password")
    now = utcnow()
    user.password_hash = passwords.hash(password)
    user.password_changed_at = now
    user.password_change_required = True
    await identity.revoke_sessions_of(session, user.id, now)

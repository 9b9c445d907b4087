"""/api/admin/users and /api/admin/tenants/{tenant_id}/members: HTTP only; the rules are in
service.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit.http import Cursor, Limit, Session, etag, fields, state
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.tenants.endpoints import load as load_tenant
from llmrelay.admin.users import repository, service
from llmrelay.admin.users.schemas import (
    MemberIn,
    MemberPage,
    MemberPatch,
    MembershipOut,
    TemporaryPasswordIn,
    UserIn,
    UserOut,
    UserPage,
    UserPatch,
    membership_out,
    user_out,
)
from llmrelay.admin.versions import commit, expect_version
from llmrelay.store.models_access import Membership, User

router = APIRouter(tags=["users"])
Reader = Annotated[Actor, Depends(require("users:read"))]
Writer = Annotated[Actor, Depends(require("users:write"))]


async def _out(session: AsyncSession, actor: Actor, user: User) -> UserOut:
    rows = service.visible_memberships(actor, await repository.memberships_of(session, user.id))
    return user_out(user, [membership_out(m, user.email) for m in rows])


def _audited(out: UserOut) -> dict[str, Any]:
    return fields(out) | {"memberships": None}


@router.get("/users")
async def list_users(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    email: str | None = None,
) -> UserPage:
    """Accounts with a membership in the caller's tenants (every account for a platform admin)."""
    tenants = actor.tenants_for("users:read")
    where = None if tenants is None else repository.in_tenants(tenants)
    email = email.strip().lower() if email else None
    rows, next_cursor = await repository.list_page(session, where, email, limit, cursor)
    return UserPage(data=[await _out(session, actor, r) for r in rows], next_cursor=next_cursor)


@router.post("/users", status_code=201)
async def create_user(
    request: Request, response: Response, session: Session, actor: Writer, body: UserIn
) -> UserOut:
    """A new account with a password (and its membership of `tenant_id` as `role`)."""
    audit.note(
        request, "user.create", "user", None, None, body.model_dump(mode="json"), body.tenant_id
    )
    user, membership = await service.create_user(session, state(request).passwords, actor, body)
    out = await _out(session, actor, user)
    tenant_id = membership.tenant_id if membership else None
    after = fields(out) | {"memberships": None, "password": "set"}
    if membership is not None:
        after |= {"tenant_id": tenant_id, "role": membership.role}
    audit.note(request, "user.create", "user", user.id, None, after, tenant_id)
    await commit(session)
    etag(response, out.version)
    return out


@router.get("/users/{user_id}")
async def get_user(user_id: str, response: Response, session: Session, actor: Reader) -> UserOut:
    user = await service.load_user(session, actor, "users:read", user_id)
    etag(response, user.version)
    return await _out(session, actor, user)


@router.patch("/users/{user_id}")
async def update_user(
    request: Request,
    response: Response,
    user_id: str,
    body: UserPatch,
    session: Session,
    actor: Writer,
) -> UserOut:
    """Rename, disable (ends the user's sessions at once) or enable an account."""
    user = await service.load_user(session, actor, "users:write", user_id)
    before = _audited(await _out(session, actor, user))
    audit.note(request, "user.update", "user", user.id, None, None, None)
    expect_version(request, body.version, user.version)
    await service.update_user(session, actor, user, body)
    await session.flush()
    out = await _out(session, actor, user)
    action = "user.disable" if body.disabled else "user.update"
    audit.note(request, action, "user", user.id, before, _audited(out), None)
    await commit(session)
    etag(response, out.version)
    return out


@router.post("/users/{user_id}/password", status_code=204)
async def set_password(
    request: Request, user_id: str, body: TemporaryPasswordIn, session: Session, actor: Writer
) -> Response:
    """Set a temporary password (a forgotten one, no mail configured): the user's sessions
    end, and the user must change it at the next sign-in (403 password_change_required on
    everything else until then). Needs what editing the account needs."""
    user = await service.load_user(session, actor, "users:write", user_id)
    audit.note(
        request,
        "user.password_set",
        "user",
        user.id,
        {"password_change_required": user.password_change_required},
        {"password_change_required": True, "password": "set"},
        None,
    )
    await service.set_temporary_password(
        session, state(request).passwords, actor, user, body.password
    )
    await session.commit()
    return Response(status_code=204)


async def _membership(
    session: AsyncSession, actor: Actor, permission: str, tenant_id: str, user_id: str
) -> Membership:
    await load_tenant(session, actor, permission, tenant_id)
    row = await repository.membership(session, tenant_id, user_id)
    if row is None:
        raise NotFound(f"no member {user_id!r} in this tenant")
    return row


@router.get("/tenants/{tenant_id}/members")
async def list_members(
    tenant_id: str, session: Session, actor: Reader, limit: Limit = 50, cursor: Cursor = None
) -> MemberPage:
    await load_tenant(session, actor, "users:read", tenant_id)
    rows, next_cursor = await repository.members_page(session, tenant_id, limit, cursor)
    return MemberPage(data=[membership_out(m, email) for m, email in rows], next_cursor=next_cursor)


@router.post("/tenants/{tenant_id}/members", status_code=201)
async def add_member(
    request: Request,
    response: Response,
    tenant_id: str,
    body: MemberIn,
    session: Session,
    actor: Writer,
) -> MembershipOut:
    """Give an existing account a role in the tenant."""
    await load_tenant(session, actor, "users:write", tenant_id)
    audit.note(request, "member.add", "membership", body.user_id, None, None, tenant_id)
    row = await service.add_member(session, tenant_id, body)
    out = membership_out(row)
    audit.note(request, "member.add", "membership", row.user_id, None, fields(out), tenant_id)
    await commit(session)
    etag(response, out.version)
    return out


@router.patch("/tenants/{tenant_id}/members/{user_id}")
async def update_member(
    request: Request,
    response: Response,
    tenant_id: str,
    user_id: str,
    body: MemberPatch,
    session: Session,
    actor: Writer,
) -> MembershipOut:
    """Change a member's role or project limit (If-Match, or `version`)."""
    row = await _membership(session, actor, "users:write", tenant_id, user_id)
    before = fields(membership_out(row))
    audit.note(request, "member.update", "membership", user_id, None, None, tenant_id)
    expect_version(request, body.version, row.version)
    await service.update_member(session, row, body)
    await session.flush()
    out = membership_out(row)
    audit.note(request, "member.update", "membership", user_id, before, fields(out), tenant_id)
    await commit(session)
    etag(response, out.version)
    return out


@router.delete("/tenants/{tenant_id}/members/{user_id}", status_code=204)
async def remove_member(
    request: Request, tenant_id: str, user_id: str, session: Session, actor: Writer
) -> Response:
    """Remove the member; every session of the user ends at once."""
    row = await _membership(session, actor, "users:write", tenant_id, user_id)
    if request.headers.get("if-match") is not None:
        expect_version(request, None, row.version)
    before = fields(membership_out(row))
    audit.note(request, "member.remove", "membership", user_id, before, None, tenant_id)
    await service.remove_member(session, row)
    await commit(session)
    return Response(status_code=204)

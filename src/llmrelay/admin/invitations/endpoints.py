"""/api/admin/invitations (GET: the pending ones), /invitations/{user_id}/resend and
DELETE /invitations/{user_id}. HTTP only: the rules are in service.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.accounts import mails
from llmrelay.admin.accounts.schemas import InvitationOut
from llmrelay.admin.invitations import service
from llmrelay.admin.invitations.schemas import PendingInvitationPage
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.versions import commit

router = APIRouter(tags=["accounts"])
Reader = Annotated[Actor, Depends(require("users:read"))]
Writer = Annotated[Actor, Depends(require("users:write"))]


@router.get("/invitations")
async def pending(session: Session, actor: Reader) -> PendingInvitationPage:
    """Invited accounts not yet active, newest invitation first: the link's expiry and the
    invitation mail's state in the outbox."""
    return PendingInvitationPage(data=await service.page(session, actor))


@router.post("/invitations/{user_id}/resend")
async def resend(request: Request, session: Session, actor: Writer, user_id: str) -> InvitationOut:
    """A new link by mail (the previous one stops working)."""
    admin = state(request)
    audit.note(request, "user.invite", "user", user_id, None, None, None)
    invited = await service.resend(
        session,
        admin.passwords,
        admin.secrets(),
        admin.accounts,
        mails.base_url(admin.accounts, request),
        actor,
        user_id,
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
    after = {"email": out.email, "resent": True}
    audit.note(request, "user.invite", "user", out.id, None, after, out.tenant_id)
    await commit(session)
    return out


@router.delete("/invitations/{user_id}", status_code=204)
async def revoke(request: Request, session: Session, actor: Writer, user_id: str) -> None:
    """The invitation's links stop working and the pending account leaves the tenant (and
    goes, when it belongs nowhere else)."""
    audit.note(request, "user.revoke_invitation", "user", user_id, None, None, None)
    user, tenant_id = await service.revoke(session, actor, user_id)
    before = {"email": user.email, "pending": True}
    audit.note(request, "user.revoke_invitation", "user", user_id, before, None, tenant_id)
    await commit(session)

"""What the pending-invitation routes answer."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class PendingInvitationOut(BaseModel):
    #: The pending account's id (what resend and revoke name).
    user_id: str
    email: str
    name: str | None
    tenant_id: str | None
    role: str | None
    #: When the latest link stops working.
    expires_at: datetime
    expired: bool
    created_at: datetime
    #: The latest invitation mail's state in the outbox (`pending`, `sent`, `failed`; null:
    #: none found) and its last error.
    mail_status: str | None
    mail_error: str | None


class PendingInvitationPage(BaseModel):
    data: list[PendingInvitationOut]

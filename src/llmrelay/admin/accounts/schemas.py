"""Bodies of the invitation, verification and password-reset routes. A token or a password
is accepted, never returned, and never written to the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from llmrelay.admin.access import Role
from llmrelay.admin.kit.params import EMAIL, PRINTABLE

#: A link token as mailed (43 URL-safe characters); anything far off is refused as input.
Token = Field(min_length=16, max_length=200, pattern=r"^[A-Za-z0-9_-]+$")


class InvitationIn(BaseModel):
    """Invite someone by address: a new account is created pending (it signs in once the
    invitation is accepted); an existing one joins the tenant at once and is told so."""

    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=3, max_length=320, pattern=EMAIL)
    name: str | None = Field(default=None, max_length=200, pattern=PRINTABLE)
    #: The tenant joined (the caller's only tenant with users:write when omitted).
    tenant_id: str | None = None
    role: Role | None = None
    #: Limit the member to these projects of the tenant (developers); null: all of them.
    project_ids: list[str] | None = None
    #: A platform admin account (platform admins only); then tenant_id and role are optional.
    platform_admin: bool = False


class InvitationOut(BaseModel):
    #: The invited account's id.
    id: str
    email: str
    #: True: the account is new and signs in once the invitation is accepted.
    pending: bool
    platform_admin: bool
    tenant_id: str | None
    role: str | None
    #: When the invitation link stops working; null: an existing account, only told.
    expires_at: datetime | None
    #: The mail: `queued` (an SMTP server is configured: the send job delivers it) or
    #: `no_smtp` (none is: it waits in the outbox, pending, until one is configured).
    mail: Literal["queued", "no_smtp"] = "queued"


class AcceptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Token
    password: str = Field(min_length=1, max_length=1024)
    name: str | None = Field(default=None, max_length=200, pattern=PRINTABLE)


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Token


class ResetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Token
    password: str = Field(min_length=1, max_length=1024)


class ResetRequestIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=3, max_length=320)


class AccountOut(BaseModel):
    """The account a link was for, now active: sign in with it (POST /auth/login)."""

    email: str


class AcceptedOut(BaseModel):
    """Said whatever the address: whether an account exists is never told."""

    message: str


class VerificationSentOut(BaseModel):
    email: str
    expires_at: datetime

"""User and membership bodies (a password is accepted, never returned)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from llmrelay.admin.access import Role
from llmrelay.admin.kit.params import EMAIL, PRINTABLE
from llmrelay.store.models_access import Membership, User

#: The roles a membership can hold (platform admin is a user flag, not a tenant role).
MemberRole = Role


class TemporaryPasswordIn(BaseModel):
    """An admin's reset: the user must change this password at its next sign-in."""

    model_config = ConfigDict(extra="forbid")

    password: str = Field(min_length=1, max_length=1024)


class UserIn(BaseModel):
    """A new account. A caller who is not a platform admin must give the tenant and role the
    user joins (its only tenant with users:write is taken when it has one)."""

    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=3, max_length=320, pattern=EMAIL)
    password: str = Field(min_length=1, max_length=1024)
    name: str | None = Field(default=None, max_length=200, pattern=PRINTABLE)
    platform_admin: bool = False
    tenant_id: str | None = None
    role: Role | None = None
    project_ids: list[str] | None = None


class UserPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=200, pattern=PRINTABLE)
    disabled: bool | None = None
    platform_admin: bool | None = None
    version: int | None = Field(default=None, ge=1)


class MembershipOut(BaseModel):
    user_id: str
    tenant_id: str
    email: str | None = None
    role: str
    project_ids: list[str] | None
    version: int


class UserOut(BaseModel):
    id: str
    email: str
    name: str | None
    platform_admin: bool
    disabled: bool
    totp_enabled: bool
    #: Not active yet: invited and not accepted, or signed up and not verified (no sign-in).
    pending: bool = False
    #: Whether the address was confirmed by a mailed link (alerts go only to such addresses).
    email_verified: bool = False
    version: int
    created_at: datetime
    #: The memberships the caller may see (its own tenants'; every one for a platform admin).
    memberships: list[MembershipOut] = []


class UserPage(BaseModel):
    data: list[UserOut]
    next_cursor: str | None


class MemberIn(BaseModel):
    """Add an existing user (by id or email) to the tenant."""

    model_config = ConfigDict(extra="forbid")

    user_id: str | None = None
    email: str | None = Field(default=None, max_length=320)
    role: Role
    #: Limit the member to these projects of the tenant (developers); null: all of them.
    project_ids: list[str] | None = None


class MemberPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role | None = None
    project_ids: list[str] | None = None
    #: true: clear the project limit (project_ids null is "unchanged")
    all_projects: bool = False
    version: int | None = Field(default=None, ge=1)


class MemberPage(BaseModel):
    data: list[MembershipOut]
    next_cursor: str | None


def membership_out(row: Membership, email: str | None = None) -> MembershipOut:
    return MembershipOut(
        user_id=row.user_id,
        tenant_id=row.tenant_id,
        email=email,
        role=row.role,
        project_ids=row.project_ids,
        version=row.version,
    )


def user_out(row: User, memberships: list[MembershipOut]) -> UserOut:
    return UserOut(
        id=row.id,
        email=row.email,
        name=row.name,
        platform_admin=row.platform_admin,
        disabled=row.disabled,
        totp_enabled=row.totp_enabled,
        pending=row.pending,
        email_verified=row.email_verified_at is not None,
        version=row.version,
        created_at=row.created_at,
        memberships=memberships,
    )

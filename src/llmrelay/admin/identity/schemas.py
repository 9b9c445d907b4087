"""Request and response bodies of /api/admin/auth/*."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=3, max_length=320)
    password: str = Field(min_length=1, max_length=1024)
    totp_code: str | None = Field(default=None, max_length=16)
    recovery_code: str | None = Field(default=None, max_length=32)
    #: The second factor as a passkey: what navigator.credentials.get() answered to the
    #: options of POST /auth/passkeys/login/options (asked with the email and password).
    passkey: dict[str, Any] | None = None


class MembershipOut(BaseModel):
    tenant_id: str
    #: The tenant's name, for showing (its own members may not hold tenants:read).
    tenant_name: str | None = None
    role: str
    project_ids: list[str] | None
    #: The tenant requires two-factor and this user has not turned it on: no access there yet.
    two_factor_required: bool = False


class UserOut(BaseModel):
    id: str
    email: str
    name: str | None
    platform_admin: bool
    disabled: bool
    totp_enabled: bool
    version: int


class MeOut(BaseModel):
    kind: str
    user: UserOut | None
    platform_admin: bool
    memberships: list[MembershipOut]
    #: An admin set the password: change it (POST /auth/password) before anything else.
    password_change_required: bool = False


class SessionOut(MeOut):
    """A new session: send `csrf_token` back as `X-CSRF-Token` on every state-changing call."""

    csrf_token: str
    expires_at: str


class PasswordIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current_password: str = Field(min_length=1, max_length=1024)
    new_password: str = Field(min_length=1, max_length=1024)


class TotpSetupOut(BaseModel):
    secret: str
    otpauth_uri: str


class TotpCodeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=6, max_length=16)


class TotpEnabledOut(BaseModel):
    """Shown once: store the recovery codes now; each works for one sign-in."""

    recovery_codes: list[str]


class TotpDisableIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    password: str = Field(min_length=1, max_length=1024)
    code: str | None = Field(default=None, max_length=16)
    recovery_code: str | None = Field(default=None, max_length=32)

"""Request and response bodies of /api/admin/auth/passkeys*."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class PasskeyOut(BaseModel):
    id: str
    name: str
    created_at: str
    last_used_at: str | None
    #: How the browser may reach the authenticator, as it said at registration.
    transports: list[str]


class PasskeyList(BaseModel):
    data: list[PasskeyOut]


class PasskeyIn(BaseModel):
    """A registration: what navigator.credentials.create() answered to the options of
    POST /auth/passkeys/register/options (as JSON: PublicKeyCredential.toJSON())."""

    model_config = ConfigDict(extra="forbid")

    credential: dict[str, Any]
    name: str | None = Field(default=None, max_length=100)


class PasskeyCreated(PasskeyOut):
    """A new passkey. When it is the account's first second factor, its recovery codes
    (shown this once: each works for one sign-in if every passkey is lost)."""

    recovery_codes: list[str] | None = None


class PasskeyRename(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)


class OptionsIn(BaseModel):
    """Options for a sign-in: none for a password-less one (any passkey of this site the
    browser holds); the email and password for a passkey as the second factor."""

    model_config = ConfigDict(extra="forbid")

    email: str | None = Field(default=None, min_length=3, max_length=320)
    password: str | None = Field(default=None, min_length=1, max_length=1024)


class PasskeyLoginIn(BaseModel):
    """A password-less sign-in: what navigator.credentials.get() answered."""

    model_config = ConfigDict(extra="forbid")

    credential: dict[str, Any]

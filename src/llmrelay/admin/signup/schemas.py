"""The sign-up body and answer (the password is accepted, never returned or logged)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from llmrelay.admin.kit.params import EMAIL, PRINTABLE


class SignupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=3, max_length=320, pattern=EMAIL)
    password: str = Field(min_length=1, max_length=1024)
    #: The new tenant's name (its slug is made from it).
    tenant_name: str = Field(min_length=1, max_length=200, pattern=PRINTABLE)
    #: The person's name, shown in the console.
    name: str | None = Field(default=None, max_length=200, pattern=PRINTABLE)


class SignupOut(BaseModel):
    """The new tenant. The account is pending: it signs in once the link mailed to `email`
    has confirmed the address."""

    #: The new tenant's id.
    id: str
    slug: str
    name: str
    project_id: str
    user_id: str
    email: str
    pending: bool
    prepaid: bool
    balance_usd: float
    message: str


class SignupSettingsOut(BaseModel):
    """How self-service sign-up is set (LLMRELAY_SIGNUP_*: environment settings, read here
    so the console can show them; changed by the operator's deployment, not at run time)."""

    enabled: bool
    #: A signed-up tenant's wallet is prepaid (requests need a balance).
    prepaid: bool
    free_credit_usd: float
    max_per_ip: int
    window_s: float
    #: Whether mails can go out (verification links need them) and where links lead.
    mail_configured: bool
    public_url: str | None
    verification_ttl_s: float

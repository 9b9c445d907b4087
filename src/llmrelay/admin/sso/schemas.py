"""Bodies of the single sign-on routes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SsoInfoOut(BaseModel):
    """Whether single sign-on is on, and what its button says."""

    enabled: bool
    name: str | None


class BeginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: Where the provider sends the browser back (the console's /sso/callback).
    redirect_uri: str = Field(min_length=8, max_length=2000, pattern=r"^https?://")
    #: Where to go after signing in (a path of the console; kept sealed with the state).
    next: str = Field(default="/dashboard", max_length=2000)


class BeginOut(BaseModel):
    #: Send the browser here.
    authorize_url: str
    #: The sign-in's state, sealed: hand it back to /auth/sso/finish (the console keeps it
    #: in an HttpOnly cookie for the few minutes the sign-in takes).
    pending: str


class FinishIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, max_length=4000)
    state: str = Field(min_length=1, max_length=200)
    pending: str = Field(min_length=1, max_length=8000)

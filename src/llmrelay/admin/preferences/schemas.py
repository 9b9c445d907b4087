"""Tenant preference bodies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PreferencesIn(BaseModel):
    """The fields sent change; a field sent as null is cleared; one left out stays."""

    model_config = ConfigDict(extra="forbid")

    #: A virtual model of the tenant that serves requests naming the model `default`.
    default_model: str | None = Field(default=None, min_length=1, max_length=200)
    #: A virtual model of the tenant tried after a model's own fallbacks, when all failed.
    fallback_model: str | None = Field(default=None, min_length=1, max_length=200)
    #: Mail the tenant's admins and billing members when the prepaid balance falls under this.
    low_balance_usd: float | None = Field(default=None, ge=0, le=1_000_000_000)
    version: int | None = Field(default=None, ge=1)


class PreferencesOut(BaseModel):
    tenant_id: str
    default_model: str | None
    fallback_model: str | None
    low_balance_usd: float | None
    #: The tenant's version (its ETag): send it back as If-Match.
    version: int

"""Tenant bodies."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from llmrelay.admin.kit.params import PRINTABLE
from llmrelay.store.models import Tenant

SLUG = r"^[a-z0-9][a-z0-9-]{0,62}$"


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    slug: str = Field(pattern=SLUG, description="lower-case letters, digits and dashes")
    name: str = Field(min_length=1, max_length=200, pattern=PRINTABLE)
    require_2fa: bool = False


class TenantPatch(BaseModel):
    """Only the fields sent change. `version` may stand in for If-Match."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=PRINTABLE)
    require_2fa: bool | None = None
    version: int | None = Field(default=None, ge=1)


class TenantOut(BaseModel):
    id: str
    slug: str
    name: str
    require_2fa: bool
    version: int
    created_at: datetime
    updated_at: datetime


class TenantPage(BaseModel):
    data: list[TenantOut]
    next_cursor: str | None


def tenant_out(row: Tenant) -> TenantOut:
    return TenantOut(
        id=row.id,
        slug=row.slug,
        name=row.name,
        require_2fa=row.require_2fa,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )

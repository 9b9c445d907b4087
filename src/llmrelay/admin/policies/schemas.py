"""What the routing policies API answers with (requests are the config's PolicyConfig)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from llmrelay.store.models import RoutingPolicy


class PolicyOut(BaseModel):
    id: str
    tenant_id: str
    name: str
    #: Allowlists a route must pass; null = any.
    providers: list[str] | None
    tags: list[str] | None
    regions: list[str] | None
    #: Replaces the model's strategy for the bound keys; null = the model's own.
    strategy: str | None
    version: int
    created_at: datetime
    updated_at: datetime


class PolicyPage(BaseModel):
    data: list[PolicyOut]
    next_cursor: str | None


def policy_out(row: RoutingPolicy) -> PolicyOut:
    return PolicyOut(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        providers=row.providers,
        tags=row.tags,
        regions=row.regions,
        strategy=row.strategy,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )

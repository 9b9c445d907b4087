"""What the provider health and probe routes answer with."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

Health = Literal["online", "degraded", "unavailable"]


class ProbeOut(BaseModel):
    """One probe, run now (POST /providers/{id}/test)."""

    provider_id: str
    status: Health
    #: Why it is not online: credentials_refused, unreachable, rate_limited, upstream_error,
    #: unexpected_status; None when online.
    reason: str | None
    #: The provider's message (credential-looking text masked), or a note.
    detail: str | None
    latency_ms: float | None
    #: How many models the provider listed (None: no list this probe could read).
    models: int | None


class DiscoveryQueued(BaseModel):
    """The discovery job queued (or the one already waiting) for the provider."""

    job_id: str


class ProviderHealthOut(BaseModel):
    provider_id: str
    slug: str
    tenant_id: str
    status: Health
    reason: str | None
    detail: str | None
    #: Since when it has had this status (None when online).
    since: datetime | None
    checked_at: datetime | None
    #: When it is probed next (None when online: it is not probed).
    next_probe_at: datetime | None


class BreakerOut(BaseModel):
    route_id: str
    #: closed, open or half_open
    state: str


class HealthPage(BaseModel):
    """Every provider the caller may read, and this replica's circuit breakers of their
    routes (breakers are per process: another replica may see other states)."""

    data: list[ProviderHealthOut]
    breakers: list[BreakerOut]

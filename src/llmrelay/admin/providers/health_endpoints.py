"""Provider health and the operations jobs on providers: GET /providers/health, POST
/providers/{id}/test (probe now), POST /providers/{id}/discover (queue model discovery).
HTTP only; the rules are in health_service.py. Mounted before the providers router, so
`/providers/health` is never read as a provider id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.providers import health_service
from llmrelay.admin.providers.endpoints import load
from llmrelay.admin.providers.health_schemas import DiscoveryQueued, HealthPage, ProbeOut
from llmrelay.store.models import Provider

router = APIRouter(tags=["providers"])
Reader = Annotated[Actor, Depends(require("providers:read"))]
Writer = Annotated[Actor, Depends(require("providers:write"))]


@router.get("/providers/health")
async def provider_health(
    request: Request,
    session: Session,
    actor: Reader,
    tenant_id: Annotated[str | None, Query(max_length=32)] = None,
) -> HealthPage:
    """Every provider the caller may read with its health (online when no probe found it
    otherwise), and this replica's circuit-breaker state of their routes."""
    breakers = state(request).breakers
    states: dict[str, str] = dict(breakers.states()) if breakers is not None else {}
    where = visible(actor, "providers:read", Provider.tenant_id)
    return await health_service.page(session, where, tenant_id, states)


@router.post("/providers/{provider_id}/test")
async def test_provider(
    request: Request, session: Session, actor: Writer, provider_id: str
) -> ProbeOut:
    """Probe the provider now (its model list, within its connect limit and at most 30 s
    more) and keep the result in its health, exactly as the probe job does: unavailable
    takes it out of routing, online brings it back."""
    row = await load(session, actor, "providers:write", provider_id)
    admin = state(request)
    found = await health_service.test(admin.probes(), admin.database(), row)
    after = found.model_dump(exclude={"provider_id"})
    audit.note(request, "provider.test", "provider", row.id, None, after, row.tenant_id)
    return found


@router.post("/providers/{provider_id}/discover", status_code=202)
async def discover_models(
    request: Request, session: Session, actor: Writer, provider_id: str
) -> DiscoveryQueued:
    """Queue a discovery of the provider's models into its inventory (GET
    /providers/{id}/models once the job has run); the job's id (GET /jobs/{id})."""
    row = await load(session, actor, "providers:write", provider_id)
    job_id = await health_service.discover(session, row)
    queued = {"job_id": job_id}
    audit.note(request, "provider.discover", "provider", row.id, None, queued, row.tenant_id)
    await session.commit()
    wake = state(request).wake_jobs
    if wake is not None:
        wake()
    return DiscoveryQueued(job_id=job_id)

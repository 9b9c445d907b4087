"""The rules of provider health in the admin API: probing a provider now exactly as the probe
job does (jobs/probe.py: the health summary written, a change of routing announced) and, when
it is not online, making sure a probe job follows it up; queueing model discovery; and the
health page (every provider the caller may read: online when it has no health row)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqlalchemy import ColumnElement
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from llmrelay.admin.kit.problems import Conflict, NotFound
from llmrelay.admin.providers import health_repository
from llmrelay.admin.providers.health_schemas import (
    BreakerOut,
    HealthPage,
    ProbeOut,
    ProviderHealthOut,
)
from llmrelay.jobs import discovery, probe
from llmrelay.jobs.kinds import GiveUp
from llmrelay.jobs.probe import Prober
from llmrelay.store.models import Provider
from llmrelay.store.models_jobs import ONLINE


async def test(prober: Prober, engine: AsyncEngine, provider: Provider) -> ProbeOut:
    """Probe now (bounded by the provider's limits) and keep what it found."""
    try:
        change = await prober.probe(provider.id)
    except GiveUp as impossible:  # its credentials cannot be opened with this secret key
        raise Conflict(f"{impossible}: set them again") from None
    if change is None:
        raise NotFound(f"no provider {provider.id!r}")
    if change.next_probe_at is not None:  # not online: the job probes it again from then on
        async with engine.begin() as conn:
            await probe.enqueue(conn, provider.id, now=time.time(), run_at=change.next_probe_at)
    found = change.result
    return ProbeOut(
        provider_id=provider.id,
        status=found.status,
        reason=found.reason,
        detail=found.detail,
        latency_ms=found.latency_ms,
        models=found.models,
    )


async def discover(session: AsyncSession, provider: Provider) -> str:
    """Queue a discovery of the provider's models (in the request's unit of work)."""
    return await discovery.enqueue(session, provider, now=time.time())


async def page(
    session: AsyncSession,
    where: ColumnElement[bool] | None,
    tenant_id: str | None,
    breakers: Mapping[str, str],
) -> HealthPage:
    pairs = await health_repository.providers_with_health(session, where, tenant_id)
    data = [
        ProviderHealthOut(
            provider_id=provider.id,
            slug=provider.slug,
            tenant_id=provider.tenant_id,
            status=health.status if health is not None else ONLINE,
            reason=health.reason or None if health is not None else None,
            detail=health.detail if health is not None else None,
            since=health.since if health is not None else None,
            checked_at=health.checked_at if health is not None else None,
            next_probe_at=health.next_probe_at if health is not None else None,
        )
        for provider, health in pairs
    ]
    shown = await health_repository.routes_of(
        session, breakers.keys(), [provider.id for provider, _ in pairs]
    )
    return HealthPage(
        data=data, breakers=[BreakerOut(route_id=r, state=breakers[r]) for r in shown]
    )

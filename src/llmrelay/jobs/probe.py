"""The provider health probe: one call to the provider's cheapest authenticated endpoint (its
model list, providers/model_list.py), read as online, degraded or unavailable, and written to
the health summary (jobs/health.py).

    2xx (and 404/405: no model list there, but the credential was not refused)  online
    401, 403 (and Gemini's 400 API_KEY_INVALID)          unavailable  credentials_refused
    connection refused or reset, DNS, TLS, timeouts      unavailable  unreachable
    429                                                  degraded     rate_limited
    5xx                                                  degraded     upstream_error
    anything else                                        degraded     unexpected_status

Unavailable providers are left out of routing (the snapshot's denylist); degraded ones are
not. A probe job (kind `provider_probe`, payload {"provider_id"}, dedupe key
`probe:<provider_id>`: one live probe per provider) that finds its provider not online queues
itself again after LLMRELAY_PROBE_DELAYS_S (5, 10, 30, then every 60 minutes) without
spending an attempt, and ends the first time it finds it online. Who queues one: the data
plane when a provider refuses its credentials (jobs/probe_trigger.py), model discovery when
the provider refuses it, and the admin API's test when it finds the provider not online.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import structlog
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from llmrelay.gateway.executor import summarise
from llmrelay.jobs import health, queue
from llmrelay.jobs.health import HealthChange, ProbeResult
from llmrelay.jobs.keys import probe_key
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind, RunAgainAt
from llmrelay.jobs.services import Services
from llmrelay.providers.errors import UpstreamError, UpstreamTimeoutError
from llmrelay.providers.model_list import Listing, UnlistableProvider, list_models
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.snapshot.builder import provider_snap
from llmrelay.snapshot.model import ProviderSnap
from llmrelay.snapshot.signals import ConfigPublisher
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider
from llmrelay.store.models_jobs import DEGRADED, ONLINE, UNAVAILABLE

log = structlog.get_logger(__name__)

PROBE_KIND: Final = "provider_probe"
#: A model list that takes longer than this to start answering counts as unreachable (the
#: provider's own `timeout_s` when that is shorter).
PROBE_TIMEOUT_S: Final = 30.0


def classify(listing: Listing) -> ProbeResult:
    """What a provider's answer to the model list says about its health."""
    status = listing.status
    latency = listing.latency_ms
    detail = None if listing.detail is None else masked(status, listing.detail)
    if 200 <= status < 300:
        count = None if listing.models is None else len(listing.models)
        return ProbeResult(ONLINE, None, detail, latency, count)
    if listing.credentials_refused:
        return ProbeResult(UNAVAILABLE, "credentials_refused", detail, latency)
    if status in (404, 405):
        note = f"HTTP {status}: this provider has no model list; its credentials were accepted"
        return ProbeResult(ONLINE, None, note, latency)
    if status == 429:
        return ProbeResult(DEGRADED, "rate_limited", detail, latency)
    if status >= 500:
        return ProbeResult(DEGRADED, "upstream_error", detail, latency)
    return ProbeResult(DEGRADED, "unexpected_status", detail, latency)


def unreachable(error: UpstreamError, latency_ms: float) -> ProbeResult:
    """A probe the provider never answered (connection, DNS, TLS, timeout)."""
    return ProbeResult(UNAVAILABLE, "unreachable", summarise(str(error)), latency_ms)


def masked(status: int, message: str) -> str:
    """The provider's message on one short line, credential-looking text masked (the rule of
    the errors clients see)."""
    text = summarise(message)
    if 200 <= status < 300:
        return text
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


class Prober:
    """Probes providers and keeps the health summary; one per process (the job runner's
    services and the admin API share the rules)."""

    def __init__(
        self,
        engine: AsyncEngine,
        sealer: Sealer,
        registry: ProviderRegistry,
        *,
        delays_s: Sequence[float],
        publisher: ConfigPublisher | None = None,
        on_online: Callable[[str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.sealer = sealer
        self.registry = registry
        self.delays_s = tuple(delays_s)
        self.publisher = publisher
        #: Told the provider's id when a probe finds it online (this process's breakers of
        #: its routes close: gateway/trials.py).
        self.on_online = on_online

    @classmethod
    def from_services(cls, services: Services) -> Prober:
        return cls(
            services.engine,
            services.sealer,
            services.registry,
            delays_s=services.settings.probe_delays_s,
            publisher=services.publisher,
            on_online=services.provider_online,
        )

    async def check(self, provider: ProviderSnap) -> ProbeResult:
        """Call the provider now; never raises for what the provider does."""
        bounded = dataclasses.replace(provider, timeout_s=min(provider.timeout_s, PROBE_TIMEOUT_S))
        started = time.perf_counter()
        try:
            listing = await list_models(self.registry, bounded)
        except UpstreamTimeoutError as timed_out:
            return unreachable(timed_out, _ms(started))
        except UpstreamError as failed:
            return unreachable(failed, _ms(started))
        except UnlistableProvider as unlistable:
            return ProbeResult(DEGRADED, "unsupported_type", str(unlistable), None)
        return classify(listing)

    async def probe(self, provider_id: str) -> HealthChange | None:
        """Probe one provider and write what it found (announcing a routing change); None
        when the provider no longer exists."""
        loaded = await self._load(provider_id)
        if loaded is None:
            return None
        provider, tenant_id = loaded
        result = await self.check(provider)
        try:
            change = await health.record(
                self.engine,
                provider_id,
                tenant_id,
                result,
                now=time.time(),
                delays_s=self.delays_s,
            )
        except IntegrityError:  # the provider was deleted while it was being probed
            return None
        if change.generation is not None and self.publisher is not None:
            await self.publisher.publish(change.generation)
        if result.status == ONLINE and self.on_online is not None:
            self.on_online(provider_id)
        event = "provider_health_changed" if change.previous != result.status else "provider_probed"
        (log.warning if result.status != ONLINE else log.info)(
            event,
            provider=provider.slug,
            provider_id=provider_id,
            status=result.status,
            previous=change.previous,
            reason=result.reason,
            detail=result.detail,
            failures=change.failures,
            denylist_changed=change.generation is not None,
        )
        return change

    async def _load(self, provider_id: str) -> tuple[ProviderSnap, str] | None:
        async with session_factory(self.engine)() as session:
            row = await session.get(Provider, provider_id)
            if row is None:
                return None
            try:
                return provider_snap(row, self.sealer), row.tenant_id
            except CredentialError as sealed:
                raise GiveUp(f"the provider's credentials cannot be opened: {sealed}") from None


async def enqueue(
    conn: AsyncConnection | AsyncSession,
    provider_id: str,
    *,
    now: float,
    run_at: float | None = None,
) -> str | None:
    """Queue a probe of the provider (in the caller's transaction): due at `run_at` (default
    now). When one is queued already, a probe due now brings it forward instead. The live
    probe's id; None when the provider does not exist."""
    tenant_id = (
        await conn.execute(select(Provider.tenant_id).where(Provider.id == provider_id))
    ).scalar()
    if tenant_id is None:
        return None
    key = probe_key(provider_id)
    made = await queue.enqueue(
        conn,
        PROBE_KIND,
        {"provider_id": provider_id},
        now=now,
        run_at=run_at,
        dedupe_key=key,
        tenant_id=str(tenant_id),
    )
    if made is not None:
        return made
    if run_at is None or run_at <= now:
        await queue.hasten(conn, key, now=now)
    return await queue.holder(conn, key)


async def run(context: JobContext) -> dict[str, Any]:
    """The job: probe; not online -> again after the schedule's next wait (no attempt spent)."""
    provider_id = context.payload.get("provider_id")
    if not isinstance(provider_id, str):
        raise GiveUp("payload.provider_id: a provider id is required")
    prober = Prober.from_services(context.services)
    change = await prober.probe(provider_id)
    if change is None:
        return {"provider_id": provider_id, "status": "deleted"}
    if change.next_probe_at is not None:
        raise RunAgainAt(change.next_probe_at)
    return {
        "provider_id": provider_id,
        "status": change.result.status,
        "latency_ms": change.result.latency_ms,
        "models": change.result.models,
    }


def kind() -> JobKind:
    # A probe waits for its provider's limits at most (PROBE_TIMEOUT_S and the connect limit).
    return JobKind(PROBE_KIND, run, max_attempts=5, timeout_s=120.0)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 1)

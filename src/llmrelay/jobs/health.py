"""The provider health summary (table provider_health): what a probe found, written the one
way the probe job and the admin API's "test" both use.

A provider never probed has no row (and counts as online). A probed one has the status it
was found in ("online", "degraded" or "unavailable"), why when not online (`reason`; empty
when online), the provider's message with credential-looking text masked (`detail`), how many
probes in a row found it failing (`failures`), since when it has had that status, when it was
last checked and, when not online, when the next probe runs. The snapshot's denylist reads
the "unavailable" rows only: one small query.

Routing reads only "unavailable" (the denylist). So a probe that moves a provider into or out
of it bumps the config generation in the same transaction, and the caller announces it after
the commit (`HealthChange.generation`): every replica rebuilds its snapshot at once. Moving
between online and degraded changes no route and bumps nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from llmrelay.jobs.kinds import fixed_schedule
from llmrelay.jobs.queue import utc
from llmrelay.store.bootstrap import bump_generation
from llmrelay.store.db import session_factory
from llmrelay.store.models_jobs import ONLINE, UNAVAILABLE, ProviderHealth


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe found. `reason` is None when online."""

    status: str
    reason: str | None
    detail: str | None
    latency_ms: float | None
    #: How many models the provider listed (None: it listed none this probe could read).
    models: int | None = None


@dataclass(frozen=True, slots=True)
class HealthChange:
    """A probe's result as the summary took it."""

    result: ProbeResult
    #: The status before (online when there was no row).
    previous: str
    #: Probes in a row that found the provider not online (0 when online).
    failures: int
    #: When the next probe runs (Unix time; None when online: no more probes).
    next_probe_at: float | None
    #: The generation bumped because routing changes (into or out of "unavailable"): announce
    #: it after the commit. None: nothing routing reads changed.
    generation: int | None


def _insert(session: AsyncSession) -> Any:
    postgres = session.get_bind().dialect.name == "postgresql"
    return (postgresql.insert if postgres else sqlite.insert)(ProviderHealth)


async def record(
    engine: AsyncEngine,
    provider_id: str,
    tenant_id: str,
    result: ProbeResult,
    *,
    now: float,
    delays_s: Sequence[float],
) -> HealthChange:
    """Write a probe's result (one transaction)."""
    async with session_factory(engine)() as session, session.begin():
        held = await session.get(ProviderHealth, provider_id, with_for_update=True)
        previous = held.status if held is not None else ONLINE
        generation = None
        if (previous == UNAVAILABLE) != (result.status == UNAVAILABLE):
            generation = await bump_generation(session)
        checked = utc(now)
        if result.status == ONLINE:  # kept too: when it was checked, online since when
            values = {
                "provider_id": provider_id,
                "tenant_id": tenant_id,
                "status": ONLINE,
                "reason": "",
                "detail": result.detail,
                "failures": 0,
                "since": held.since if held is not None and held.status == ONLINE else checked,
                "checked_at": checked,
                "next_probe_at": None,
            }
            await session.execute(
                _insert(session)
                .values(**values)
                .on_conflict_do_update(
                    index_elements=["provider_id"],
                    set_={k: v for k, v in values.items() if k != "provider_id"},
                )
            )
            return HealthChange(result, previous, 0, None, generation)
        failures = (held.failures if held is not None and held.status != ONLINE else 0) + 1
        next_probe_at = now + fixed_schedule(delays_s)(failures)
        values = {
            "provider_id": provider_id,
            "tenant_id": tenant_id,
            "status": result.status,
            "reason": result.reason or "unknown",
            "detail": result.detail,
            "failures": failures,
            "since": held.since if held is not None and held.status == result.status else checked,
            "checked_at": checked,
            "next_probe_at": utc(next_probe_at),
        }
        insert = _insert(session).values(**values)
        changes = {k: v for k, v in values.items() if k != "provider_id"}
        # An upsert: a probe job and an operator's test may write the same row at once.
        await session.execute(
            insert.on_conflict_do_update(index_elements=["provider_id"], set_=changes)
        )
    return HealthChange(result, previous, failures, next_probe_at, generation)

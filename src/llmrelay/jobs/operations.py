"""The operations jobs: provider health probes, model discovery, price sync, record and
payload retention (docs/jobs.md). jobs/registry.py lists them with every other kind."""

from __future__ import annotations

from llmrelay.jobs import discovery, price_sync, probe, retention
from llmrelay.jobs.kinds import JobKind
from llmrelay.jobs.runner import Schedule
from llmrelay.settings import Settings


def kinds() -> list[JobKind]:
    return [probe.kind(), discovery.kind(), price_sync.kind(), *retention.kinds()]


def schedules(settings: Settings) -> list[Schedule]:
    return [
        Schedule(price_sync.PRICE_SYNC_KIND, settings.price_sync_interval_s),
        *retention.schedules(settings),
    ]

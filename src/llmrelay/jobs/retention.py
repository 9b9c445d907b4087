"""Record and payload retention as periodic jobs (kinds `record_retention` and
`payload_retention`, every LLMRELAY_RETENTION_INTERVAL_S): one job per time slot across all
replicas (the slot's dedupe key), so one replica prunes each round instead of every replica
starting its own timer. The pruning itself is store/retention.py and
store/payload_retention.py (batches, whole PostgreSQL partitions, their advisory locks).

Scheduled only when a retention period is set (LLMRELAY_RECORD_RETENTION_DAYS,
LLMRELAY_PAYLOAD_RETENTION_DAYS); the period is read from the settings when the job runs.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from llmrelay.jobs.kinds import JobContext, JobKind
from llmrelay.jobs.runner import Schedule
from llmrelay.jobs.services import Services
from llmrelay.settings import Settings
from llmrelay.store import payload_retention, retention

log = structlog.get_logger(__name__)

RECORD_RETENTION_KIND: Final = "record_retention"
PAYLOAD_RETENTION_KIND: Final = "payload_retention"


async def prune_records(context: JobContext) -> dict[str, Any]:
    services: Services = context.services
    days = services.settings.record_retention_days
    if days is None:
        return {"skipped": "LLMRELAY_RECORD_RETENTION_DAYS is not set"}
    pruned = await retention.prune(services.engine, days)
    if pruned.deleted or pruned.dropped:
        log.info(
            "records_pruned",
            deleted=pruned.deleted,
            partitions_dropped=list(pruned.dropped),
            retention_days=days,
        )
    return {"deleted": pruned.deleted, "partitions_dropped": list(pruned.dropped)}


async def prune_payloads(context: JobContext) -> dict[str, Any]:
    services: Services = context.services
    settings = services.settings
    days = payload_retention.retention_days(
        settings.payload_retention_days, settings.record_retention_days
    )
    if days is None:
        return {"skipped": "no retention period is set"}
    deleted = await payload_retention.prune(services.engine, days)
    if deleted:
        log.info("payloads_pruned", deleted=deleted, retention_days=days)
    return {"deleted": deleted}


def kinds() -> list[JobKind]:
    # One job per slot ever (release_dedupe=False); a slot that failed is not run again,
    # the next slot is (a failure is retried within the slot by the attempts).
    return [
        JobKind(
            RECORD_RETENTION_KIND,
            prune_records,
            max_attempts=3,
            release_dedupe=False,
            timeout_s=3600.0,
        ),
        JobKind(
            PAYLOAD_RETENTION_KIND,
            prune_payloads,
            max_attempts=3,
            release_dedupe=False,
            timeout_s=3600.0,
        ),
    ]


def schedules(settings: Settings) -> list[Schedule]:
    interval = settings.retention_interval_s
    found = []
    if settings.record_retention_days is not None:
        found.append(Schedule(RECORD_RETENTION_KIND, interval))
    payload_days = payload_retention.retention_days(
        settings.payload_retention_days, settings.record_retention_days
    )
    if payload_days is not None:
        found.append(Schedule(PAYLOAD_RETENTION_KIND, interval))
    return found

"""The alert jobs and their schedules (every LLMRELAY_ALERTS_INTERVAL_S, whichever runner
queues a slot first: one round per slot across all replicas)."""

from __future__ import annotations

import time
from typing import Any

from llmrelay.alerts import budgets, low_balance
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind
from llmrelay.jobs.runner import Schedule
from llmrelay.mail import links
from llmrelay.settings import Settings
from llmrelay.store.crypto import Sealer
from llmrelay.store.types import utcnow

LOW_BALANCE_ALERTS = "low_balance_alerts"
BUDGET_ALERTS = "budget_alerts"


def base_url(settings: Settings) -> str:
    """Where alert links point: LLMRELAY_PUBLIC_URL (development: the default address)."""
    return settings.public_url or links.DEVELOPMENT_BASE


def _needs(context: JobContext) -> tuple[Settings, Sealer]:
    if context.sealer is None:
        raise GiveUp("this worker has no secret key to seal the alert mails with")
    settings: Settings = context.services.settings
    return settings, context.sealer


async def low_balance_alerts(context: JobContext) -> dict[str, Any] | None:
    settings, sealer = _needs(context)
    return dict(await low_balance.run(context.engine, sealer, base_url(settings), utcnow()))


async def budget_alerts(context: JobContext) -> dict[str, Any] | None:
    settings, sealer = _needs(context)
    return dict(await budgets.run(context.engine, sealer, base_url(settings), time.time()))


def _periodic(name: str, run: Any) -> JobKind:
    """One attempt per slot (the next slot is the retry), the slot's key kept for good."""
    return JobKind(
        name, run, max_attempts=1, release_dedupe=False, keep_finished_s=86_400.0, timeout_s=300.0
    )


def kinds() -> list[JobKind]:
    return [
        _periodic(LOW_BALANCE_ALERTS, low_balance_alerts),
        _periodic(BUDGET_ALERTS, budget_alerts),
    ]


def schedules(settings: Settings) -> list[Schedule]:
    every = settings.alerts_interval_s
    return [Schedule(LOW_BALANCE_ALERTS, every), Schedule(BUDGET_ALERTS, every)]

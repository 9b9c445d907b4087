"""Billing's durable jobs, listed by jobs/registry.py: the automatic top-up of one wallet
(queued by a settle, one live job per wallet) and the periodic reconciliation."""

from __future__ import annotations

from llmrelay.billing import auto_topup, reconcile
from llmrelay.billing.settle import AUTO_TOPUP_KIND
from llmrelay.jobs.kinds import JobKind, exponential_backoff
from llmrelay.jobs.runner import Schedule
from llmrelay.settings import Settings


def kinds() -> list[JobKind]:
    return [
        JobKind(
            AUTO_TOPUP_KIND,
            auto_topup.run,
            max_attempts=5,
            backoff=exponential_backoff(base_s=10.0, cap_s=600.0),
            timeout_s=120.0,
        ),
        # One run per periodic slot, ever (the slot's dedupe key is kept); a run that finds
        # Stripe unreachable is retried within its slot.
        JobKind(
            reconcile.KIND,
            reconcile.run,
            max_attempts=3,
            backoff=exponential_backoff(base_s=15.0, cap_s=120.0),
            release_dedupe=False,
            keep_finished_s=86_400.0,
            timeout_s=600.0,
        ),
    ]


def schedules(settings: Settings) -> list[Schedule]:
    return [Schedule(reconcile.KIND, settings.billing_reconcile_interval_s)]

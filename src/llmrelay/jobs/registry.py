"""Every kind of job this version runs, and the periodic ones' schedules: the one list a
runner is built from (stack.py), so `serve` and `llmrelay worker` run the same jobs."""

from __future__ import annotations

from llmrelay.alerts import jobs as alerts
from llmrelay.billing import jobs as billing
from llmrelay.jobs import operations
from llmrelay.jobs.background_responses import BACKGROUND_RESPONSE
from llmrelay.jobs.generations import GENERATION
from llmrelay.jobs.kinds import JobKind
from llmrelay.jobs.runner import Schedule
from llmrelay.jobs.webhooks.delivery import WEBHOOK_DELIVERY
from llmrelay.mail import jobs as mail
from llmrelay.settings import Settings


def job_kinds() -> list[JobKind]:
    return [
        *operations.kinds(),
        BACKGROUND_RESPONSE,
        GENERATION,
        WEBHOOK_DELIVERY,
        *billing.kinds(),
        *mail.kinds(),
        *alerts.kinds(),
    ]


def schedules(settings: Settings) -> list[Schedule]:
    return [
        *operations.schedules(settings),
        *billing.schedules(settings),
        *mail.schedules(settings),
        *alerts.schedules(settings),
    ]

"""Every kind of job this version runs, and the periodic ones' schedules: the one list a
runner is built from (stack.py), so `serve` and `llmrelay worker` run the same jobs."""

from __future__ import annotations

from llmrelay.alerts import jobs as alerts
from llmrelay.jobs.kinds import JobKind
from llmrelay.jobs.runner import Schedule
from llmrelay.mail import jobs as mail
from llmrelay.settings import Settings


def job_kinds() -> list[JobKind]:
    return [*mail.kinds(), *alerts.kinds()]


def schedules(settings: Settings) -> list[Schedule]:
    return [*mail.schedules(settings), *alerts.schedules(settings)]

"""The budget alerts on SQLite and PostgreSQL, from the month's recorded spend: a key and a
project past 80 % and 100 % of their monthly budgets get one mail per threshold and month (a
jump past both sends the 100 % one alone); running again sends nothing; someone verified later
is not sent an old alert."""

from __future__ import annotations

import time
from itertools import count

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.alerts import budgets
from llmrelay.alerts.jobs import BUDGET_ALERTS
from llmrelay.jobs import queue
from llmrelay.limits.base import month_of
from llmrelay.store import rollups
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models import ApiKey, Project, RequestRecord, UsageRollupDirty
from llmrelay.store.models_access import User
from llmrelay.store.types import utcnow
from tests.alerts.support import ALERTED, alert_tenant
from tests.support.mail import mail_settings, mail_text, outbox, runner

SEALER = Sealer("budget-alert-tests-secret-key-0123456789ab")
_ids = count()


async def _round(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await queue.enqueue(conn, BUDGET_ALERTS, {}, now=time.time())
    await runner(engine, SEALER, mail_settings(None)).run_until_idle()


async def _spend(engine: AsyncEngine, tenant: str, project: str, key: str, micros: int) -> None:
    """A request record of that cost, its hour marked for the rollups (as the recorder does)."""
    now = utcnow()
    async with session_factory(engine)() as session:
        session.add(
            RequestRecord(
                request_id=f"req-{next(_ids)}",
                created_at=now,
                tenant_id=tenant,
                project_id=project,
                key_id=key,
                endpoint="chat.completions",
                status_code=200,
                latency_ms=1.0,
                cost_micros=micros,
            )
        )
        hour = rollups.hour_of(now)
        if await session.get(UsageRollupDirty, hour) is None:
            session.add(UsageRollupDirty(hour=hour, version=1))
        await session.commit()


async def _alerts(engine: AsyncEngine) -> list[tuple[str, str, str]]:
    """(scope, threshold, recipient) of each budget mail."""
    found = []
    for mail in await outbox(engine):
        if mail["kind"] == "budget_alert":
            _, scope, _, _, pct, _ = str(mail["dedupe_key"]).split(":")
            found.append((scope, pct, mail["to_address"]))
    return sorted(found)


async def test_one_mail_per_threshold_and_month(engine: AsyncEngine) -> None:
    acme = await alert_tenant(engine)
    async with session_factory(engine)() as session:
        project = Project(tenant_id=acme.id, name="web", monthly_budget_micros=10_000_000)
        session.add(project)
        await session.flush()
        key = ApiKey(
            tenant_id=acme.id,
            project_id=project.id,
            name="ci",
            digest="d" * 64,
            prefix="llr-",
            last_four="abcd",
            monthly_budget_micros=1_000_000,
        )
        session.add(key)
        await session.commit()
        project_id, key_id = project.id, key.id

    await _spend(engine, acme.id, project_id, key_id, 500_000)  # key 50 %
    await _round(engine)
    assert await _alerts(engine) == []

    await _spend(engine, acme.id, project_id, key_id, 350_000)  # key 85 %
    await _round(engine)
    await _round(engine)
    assert await _alerts(engine) == [("key", "80", email) for email in ALERTED]
    mail = await mail_text(engine, SEALER, "boss@acme.example", "budget_alert")
    assert "Key ci (project web)" in mail and "$0.85" in mail and "$1.00" in mail
    assert month_of(time.time()) in mail

    # a member verified now is not sent the alert that went out already
    async with session_factory(engine)() as session:
        await session.execute(
            update(User)
            .where(User.email == "unverified@acme.example")
            .values(email_verified_at=utcnow())
        )
        await session.commit()
    await _round(engine)
    assert len(await _alerts(engine)) == 2

    await _spend(engine, acme.id, project_id, key_id, 200_000)  # key 105 %
    await _round(engine)
    key_alerts = [a for a in await _alerts(engine) if a[0] == "key"]
    assert [a[1] for a in key_alerts].count("100") == 3  # the newly verified admin too
    text_100 = await mail_text(engine, SEALER, "boss@acme.example", "budget_alert")
    assert "429" in text_100

    await _spend(engine, acme.id, project_id, key_id, 9_000_000)  # project 10.05 $: 100 %
    await _round(engine)
    project_alerts = [a for a in await _alerts(engine) if a[0] == "project"]
    assert {a[1] for a in project_alerts} == {"100"}  # the 80 % one is not sent after it
    assert len(project_alerts) == 3


def test_thresholds() -> None:
    assert budgets.crossed(79, 100) is None
    assert budgets.crossed(80, 100) == 80
    assert budgets.crossed(99, 100) == 80
    assert budgets.crossed(100, 100) == 100
    assert budgets.crossed(500, 100) == 100
    assert budgets.crossed(1, 0) is None

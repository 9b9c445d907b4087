"""The webhook_delivery job against real databases and a real receiver: retried on the
schedule until the receiver takes the event (every attempt logged, every one signed), given up
once the attempts are spent, and refused at delivery (no request made) when the URL may not be
called now, whatever was allowed when it was submitted."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs.runner import JobRunner, RunnerOptions
from llmrelay.jobs.webhooks import events, signing
from llmrelay.jobs.webhooks.delivery import WEBHOOK_DELIVERY, max_attempts
from llmrelay.settings import Settings
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models import Project, Tenant
from llmrelay.store.models_jobs import Job
from llmrelay.store.webhook_secrets import project_secret
from tests.support.counting_server import counting_server
from tests.support.webhook_receiver import WebhookReceiver

SEALER = Sealer("webhook-delivery-tests-secret-key-0123456789")
FAST = RunnerOptions(concurrency=4, lease_s=5.0, poll_s=0.02, housekeeping_s=0.5)
LOOPBACK = Settings(
    webhook_allowed_hosts="127.0.0.1",
    webhook_allow_loopback=True,
    webhook_retry_schedule_s="0.05,0.05,0.05",
)


async def _project(engine: AsyncEngine) -> Project:
    async with session_factory(engine)() as session:
        tenant = Tenant(slug="hooks", name="Hooks")
        session.add(tenant)
        await session.flush()
        project = Project(tenant_id=tenant.id, name="p")
        session.add(project)
        await session.commit()
        return project


async def _send(
    engine: AsyncEngine, settings: Settings, project: Project, url: str, n: int = 0
) -> dict[str, Any]:
    """Queue one event, run the deliveries until it is no longer pending; its row."""
    event_id = f"evt_test_{n}_{time.monotonic_ns()}"
    async with engine.begin() as conn:
        delivery_id = await events.enqueue_event(
            conn,
            SEALER,
            event_id=event_id,
            event_type="generation.completed",
            data={"n": n},
            url=url,
            project_id=project.id,
            tenant_id=project.tenant_id,
            source_job_id=None,
            now=time.time(),
            max_attempts=max_attempts(settings),
        )
    runner = JobRunner(
        engine,
        [WEBHOOK_DELIVERY],
        sealer=SEALER,
        services=SimpleNamespace(settings=settings),
        options=FAST,
    )
    runner.start()
    try:
        deadline = time.monotonic() + 15
        while True:
            async with engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(events.deliveries).where(events.deliveries.c.id == delivery_id)
                    )
                ).one()
                job = (
                    await conn.execute(
                        select(Job.status).where(
                            Job.payload["delivery_id"].as_string() == delivery_id
                        )
                    )
                ).scalar()
            if row.status != events.PENDING and job in ("succeeded", "failed"):
                return dict(row._mapping) | {"job": job}
            assert time.monotonic() < deadline, (row.status, job)
            await asyncio.sleep(0.05)
    finally:
        await runner.stop()


async def test_retried_until_taken_every_attempt_logged_and_signed(
    engine: AsyncEngine, webhook_receiver: WebhookReceiver
) -> None:
    project = await _project(engine)
    path = f"/fail-first-2-{time.monotonic_ns()}"
    row = await _send(engine, LOOPBACK, project, webhook_receiver.url(path))
    assert (row["status"], row["attempts"], row["job"]) == ("delivered", 3, "succeeded")
    assert [a["status_code"] for a in row["attempt_log"]] == [500, 500, 200]
    assert row["delivered_at"] is not None and row["last_status_code"] == 200
    async with engine.begin() as conn:
        secret = await project_secret(conn, SEALER, project.id)
    received = webhook_receiver.on(path)
    assert len(received) == 3 and len({r.body for r in received}) == 1
    for attempt in received:
        assert signing.verify(
            secret,
            row["event_id"],
            int(attempt.header("X-Webhook-Timestamp")),
            attempt.body,
            attempt.header("X-Webhook-Signature"),
            now=int(time.time()),
        )
        assert not signing.verify(
            secret + "x",
            row["event_id"],
            int(attempt.header("X-Webhook-Timestamp")),
            attempt.body,
            attempt.header("X-Webhook-Signature"),
            now=int(time.time()),
        )


async def test_given_up_once_the_attempts_are_spent(
    engine: AsyncEngine, webhook_receiver: WebhookReceiver
) -> None:
    project = await _project(engine)
    settings = Settings(
        webhook_allowed_hosts="127.0.0.1",
        webhook_allow_loopback=True,
        webhook_retry_schedule_s="0.05",
    )
    path = f"/status-503-{time.monotonic_ns()}"
    row = await _send(engine, settings, project, webhook_receiver.url(path))
    assert (row["status"], row["attempts"], row["job"]) == ("failed", 2, "failed")
    assert [a["status_code"] for a in row["attempt_log"]] == [503, 503]
    assert len(webhook_receiver.on(path)) == 2


async def test_refused_at_delivery_without_a_request(
    engine: AsyncEngine, webhook_receiver: WebhookReceiver
) -> None:
    project = await _project(engine)
    before = len(webhook_receiver.received)
    cases = [
        (LOOPBACK, "http://10.0.0.1/hook", "private"),
        (LOOPBACK, "http://169.254.169.254/latest/meta-data/", "link-local"),
        # allowed when it was submitted; the operator has since taken loopback away
        (
            Settings(webhook_allowed_hosts="127.0.0.1"),
            webhook_receiver.url("/ok"),
            "loopback",
        ),
    ]
    for n, (settings, url, says) in enumerate(cases):
        row = await _send(engine, settings, project, url, n)
        assert (row["status"], row["attempts"], row["job"]) == ("failed", 1, "failed")
        assert row["last_status_code"] is None and says in row["last_error"]
        assert row["last_error"].startswith("refused:")
    assert len(webhook_receiver.received) == before


async def test_a_redirect_to_an_internal_address_is_not_followed(
    engine: AsyncEngine, webhook_receiver: WebhookReceiver
) -> None:
    """The tenants' outbound policy opens the receiver's one address (127.0.0.1/32); it
    answers 307 to a real server at 127.0.0.2, which the policy does not open: the attempt
    fails on the 307 and that server gets no connection; named directly, it is refused."""
    opened = Settings(tenant_outbound_allow="127.0.0.1/32", webhook_retry_schedule_s="0.05")
    project = await _project(engine)
    async with counting_server("127.0.0.2") as inner:
        path = f"/redirect-to-127.0.0.2:{inner.port}"
        row = await _send(engine, opened, project, webhook_receiver.url(path))
        assert (row["status"], row["last_status_code"]) == ("failed", 307)
        direct = await _send(engine, opened, project, inner.url("/hook"), n=1)
        assert direct["status"] == "failed" and "loopback" in direct["last_error"]
        assert inner.connections == 0
    assert len(webhook_receiver.on(path)) == 2  # both attempts reached the allowed receiver

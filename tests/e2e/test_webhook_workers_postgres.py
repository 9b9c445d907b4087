"""Two `llmrelay worker` processes on one PostgreSQL database drain 100 queued webhook
deliveries to a real receiver: each job is claimed once (epoch 1), by one worker or the other
(both take part), and every event arrives exactly once, signed."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from llmrelay.jobs.webhooks import events, signing
from llmrelay.store import migrate
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import create_engine, session_factory
from llmrelay.store.models import Project, Tenant
from llmrelay.store.models_jobs import Job
from llmrelay.store.webhook_secrets import project_secret
from tests.support.webhook_receiver import WebhookReceiver
from tests.support.worker_process import WorkerProcess

pytestmark = pytest.mark.postgres

SECRET_KEY = "two-workers-secret-key-0123456789abcdef"
EVENTS = 100


async def _prepare(url: str) -> tuple[str, str]:
    """A migrated database with one project; (project id, its webhook secret)."""
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)
        async with session_factory(engine)() as session:
            tenant = Tenant(slug="t", name="T")
            session.add(tenant)
            await session.flush()
            project = Project(tenant_id=tenant.id, name="p")
            session.add(project)
            await session.commit()
        async with engine.begin() as conn:
            secret = await project_secret(conn, Sealer(SECRET_KEY), project.id)
        return project.id, secret
    finally:
        await engine.dispose()


async def _enqueue(url: str, project_id: str, target: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for n in range(EVENTS):
                await events.enqueue_event(
                    conn,
                    Sealer(SECRET_KEY),
                    event_id=f"evt_{n:03d}",
                    event_type="generation.completed",
                    data={"n": n},
                    url=target,
                    project_id=project_id,
                    tenant_id=None,
                    source_job_id=None,
                    now=time.time(),
                    max_attempts=3,
                )
    finally:
        await engine.dispose()


async def _jobs(url: str) -> list[tuple[str, int, int]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                select(Job.status, Job.epoch, Job.attempts).where(Job.kind == events.KIND)
            )
            return [(r.status, r.epoch, r.attempts) for r in rows]
    finally:
        await engine.dispose()


def test_two_workers_deliver_each_event_exactly_once(pg_url: str, tmp_path: Path) -> None:
    project_id, secret = asyncio.run(_prepare(pg_url))
    receiver = WebhookReceiver().start()
    env = {
        "LLMRELAY_DATABASE_URL": pg_url,
        "LLMRELAY_SECRET_KEY": SECRET_KEY,
        "LLMRELAY_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        "LLMRELAY_WEBHOOK_ALLOW_LOOPBACK": "true",
        "LLMRELAY_JOBS_POLL_S": "0.05",
    }
    workers = [WorkerProcess(tmp_path, name, env).launch() for name in ("a", "b")]
    for worker in workers:
        worker.wait_started()
    try:
        asyncio.run(_enqueue(pg_url, project_id, receiver.url("/slow-20")))
        deadline = time.monotonic() + 60
        while len({r.header("X-Webhook-Id") for r in receiver.received}) < EVENTS:
            assert time.monotonic() < deadline, f"{len(receiver.received)} received"
            time.sleep(0.1)
        time.sleep(0.5)  # a duplicate, were there one, would arrive now
    finally:
        codes = [worker.stop() for worker in workers]
        receiver.stop()
    assert codes == [0, 0], [w.logs() for w in workers]
    counts = Counter(r.header("X-Webhook-Id") for r in receiver.received)
    assert sorted(counts) == [f"evt_{n:03d}" for n in range(EVENTS)]
    assert set(counts.values()) == {1}  # exactly once each
    for received in receiver.received:
        assert signing.verify(
            secret,
            received.header("X-Webhook-Id"),
            int(received.header("X-Webhook-Timestamp")),
            received.body,
            received.header("X-Webhook-Signature"),
            now=int(time.time()),
        )
    jobs = asyncio.run(_jobs(pg_url))
    assert len(jobs) == EVENTS and set(jobs) == {("succeeded", 1, 1)}  # each claimed once
    shares = [w.logs().count('"webhook_attempt"') for w in workers]
    assert sum(shares) == EVENTS and all(shares), shares  # both workers took part

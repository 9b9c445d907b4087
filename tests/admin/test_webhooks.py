"""Webhooks over the real admin app: a project's signing secret (made once, sealed at rest,
rotated) and the list of its deliveries (newest first, by page, by status)."""

from __future__ import annotations

import time
from typing import Any

import httpx
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs.webhooks import events
from llmrelay.store.models import Project
from tests.admin.conftest import SEALER


async def _project(admin: httpx.AsyncClient, name: str) -> str:
    response = await admin.post("/projects", json={"name": name})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def test_the_secret_is_made_once_sealed_and_rotated(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    project = await _project(admin, "hooks")
    first = await admin.get(f"/projects/{project}/webhook-secret")
    assert first.status_code == 200, first.text
    secret = first.json()["secret"]
    assert secret.startswith("whsec_") and len(secret) == 6 + 43
    assert (await admin.get(f"/projects/{project}/webhook-secret")).json()["secret"] == secret
    async with engine.connect() as conn:
        sealed = (
            await conn.execute(select(Project.webhook_secret_sealed).where(Project.id == project))
        ).scalar_one()
    assert sealed and secret not in sealed
    rotated = await admin.post(f"/projects/{project}/webhook-secret/rotate")
    assert rotated.status_code == 200, rotated.text
    fresh = rotated.json()["secret"]
    assert fresh.startswith("whsec_") and fresh != secret
    assert (await admin.get(f"/projects/{project}/webhook-secret")).json()["secret"] == fresh
    missing = await admin.post("/projects/no-such-project/webhook-secret/rotate")
    assert missing.status_code == 404


async def _event(engine: AsyncEngine, project: str, n: int) -> None:
    async with engine.begin() as conn:
        tenant = (
            await conn.execute(text("SELECT tenant_id FROM projects WHERE id = :p"), {"p": project})
        ).scalar_one()
        queued = await events.enqueue_event(
            conn,
            SEALER,
            event_id=f"evt_{project[:8]}_{n}",
            event_type="generation.completed",
            data={"content": f"answer {n}"},
            url=f"https://hooks.example.com/{n}",
            project_id=project,
            tenant_id=tenant,
            source_job_id=None,
            now=time.time() + n,
            max_attempts=3,
        )
        assert queued is not None


async def test_a_projects_deliveries_newest_first(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    mine, other = await _project(admin, "mine"), await _project(admin, "other")
    for n in range(3):
        await _event(engine, mine, n)
    await _event(engine, other, 9)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE webhook_deliveries SET status = 'delivered' WHERE url LIKE '%/1'")
        )
    first = await admin.get("/webhooks/deliveries", params={"project": mine, "limit": 2})
    assert first.status_code == 200, first.text
    page: dict[str, Any] = first.json()
    assert [d["url"][-1] for d in page["data"]] == ["2", "1"]
    assert page["data"][0]["status"] == "pending" and page["data"][0]["attempt_log"] == []
    rest = await admin.get(
        "/webhooks/deliveries", params={"project": mine, "cursor": page["next_cursor"]}
    )
    assert [d["url"][-1] for d in rest.json()["data"]] == ["0"]
    assert rest.json()["next_cursor"] is None
    delivered = await admin.get(
        "/webhooks/deliveries", params={"project": mine, "status": "delivered"}
    )
    assert [d["event_id"] for d in delivered.json()["data"]] == [f"evt_{mine[:8]}_1"]
    again = await _replay(engine, mine)
    assert again is None  # an event id is queued once
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT * FROM webhook_deliveries"))).all()
    assert all("answer" not in str(tuple(row)) for row in stored)  # the body is sealed


async def _replay(engine: AsyncEngine, project: str) -> str | None:
    async with engine.begin() as conn:
        return await events.enqueue_event(
            conn,
            SEALER,
            event_id=f"evt_{project[:8]}_0",
            event_type="generation.completed",
            data={},
            url="https://hooks.example.com/again",
            project_id=project,
            tenant_id=None,
            source_job_id=None,
            now=time.time(),
            max_attempts=3,
        )

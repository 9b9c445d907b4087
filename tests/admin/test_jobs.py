"""The jobs API on SQLite and PostgreSQL: each tenant sees its own jobs and platform-wide ones
are for platform admins only; sealed payloads and results, and checkpoints, are never shown;
filters and newest-first pages; cancelling a queued job, a running one, and a finished one."""

from __future__ import annotations

import time

import httpx
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from llmrelay.jobs import queue
from llmrelay.store.models_jobs import Job
from tests.admin.access_support import (
    add_tenant,
    add_user,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
)
from tests.admin.conftest import ADMIN_TOKEN
from tests.admin.support import assert_error, walk_pages

SEALED = "sealed-secret-request-body-0123456789"


async def _job(
    engine: AsyncEngine, kind: str, tenant: str | None, at: float, **extra: object
) -> str:
    async with engine.begin() as conn:
        job_id = await queue.enqueue(conn, kind, {"n": 1}, now=at, tenant_id=tenant, **extra)  # type: ignore[arg-type]
    assert job_id is not None
    return job_id


async def test_tenants_see_their_jobs_and_never_sealed_parts(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme, other = await add_tenant(engine, "acme"), await add_tenant(engine, "other")
    await add_user(engine, "boss@acme.test", {acme: "tenant_admin"})
    await add_user(engine, "vera@acme.test", {acme: "viewer"})
    now = time.time()
    mine = await _job(engine, "provider_probe", acme, now - 30, payload_sealed=SEALED)
    theirs = await _job(engine, "provider_probe", other, now - 20)
    platform = await _job(engine, "price_sync", None, now - 10)
    async with engine.begin() as conn:
        await conn.execute(
            update(Job)
            .where(Job.id == mine)
            .values(
                status="succeeded", result={"ok": True}, result_sealed=SEALED, checkpoint={"at": 3}
            )
        )

    async with console(admin_state, "boss@acme.test") as boss:
        listed = await boss.get("/jobs")
        assert [j["id"] for j in listed.json()["data"]] == [mine]
        assert SEALED not in listed.text
        shown = (await boss.get(f"/jobs/{mine}")).json()
        assert (shown["sealed_payload"], shown["sealed_result"], shown["has_checkpoint"]) == (
            True,
            True,
            True,
        )
        assert shown["result"] == {"ok": True} and shown["tenant_id"] == acme
        assert_error(await boss.get(f"/jobs/{theirs}"), 404)  # another tenant's
        assert_error(await boss.get(f"/jobs/{platform}"), 404)  # platform-wide
        assert_error(await boss.post(f"/jobs/{platform}/cancel"), 404)
    async with console(admin_state, "vera@acme.test") as vera:
        assert [j["id"] for j in (await vera.get("/jobs")).json()["data"]] == [mine]
        assert_error(await vera.post(f"/jobs/{mine}/cancel"), 403)

    async with client(admin_state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin:
        everything = [j["id"] for j in (await admin.get("/jobs")).json()["data"]]
        assert everything == [platform, theirs, mine]  # newest first
        pages = await walk_pages(admin, "/jobs", 1)
        assert [j["id"] for page in pages for j in page] == everything
        by_kind = (await admin.get("/jobs", params={"kind": "price_sync"})).json()["data"]
        assert [j["id"] for j in by_kind] == [platform]
        done = (await admin.get("/jobs", params={"status": "succeeded"})).json()["data"]
        assert [j["id"] for j in done] == [mine]
        in_tenant = (await admin.get("/jobs", params={"tenant_id": other})).json()["data"]
        assert [j["id"] for j in in_tenant] == [theirs]
        assert_error(await admin.get("/jobs", params={"status": "lost"}), 400, "status")
        assert_error(await admin.get("/jobs", params={"cursor": "not-a-cursor"}), 400, "cursor")


async def test_cancelling_queued_running_and_finished_jobs(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    now = time.time()
    waiting = await _job(engine, "model_discovery", None, now, dedupe_key="discover:x")
    running = await _job(engine, "model_discovery", None, now - 1)
    async with engine.begin() as conn:
        await conn.execute(update(Job).where(Job.id == running).values(status="running"))
    async with client(admin_state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin:
        api: httpx.AsyncClient = admin
        cancelled = await api.post(f"/jobs/{waiting}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        body = cancelled.json()
        assert (body["status"], body["dedupe_key"], body["finished_at"] is not None) == (
            "cancelled",
            None,  # the key is free: another discovery may be queued
            True,
        )
        asked = (await api.post(f"/jobs/{running}/cancel")).json()
        assert (asked["status"], asked["cancel_requested"]) == ("running", True)
        assert_error(await api.post(f"/jobs/{waiting}/cancel"), 409)  # finished already
        assert_error(await api.post("/jobs/nope/cancel"), 404)

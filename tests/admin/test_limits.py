"""Limits and budgets of projects and keys over the real admin app: PUT replaces them whole
(If-Match on the project or key), the rules name the field, the snapshot enforces them."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from tests.admin.support import assert_error, match, snapshot


async def test_project_and_key_limits(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    project = (await admin.post("/projects", json={"name": "acme"})).json()
    key = (await admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"})).json()

    url = f"/projects/{project['id']}/limits"
    read = await admin.get(url)
    assert read.json() == {
        "limits": {"rpm": None, "tpm": None, "concurrency": None},
        "monthly_budget_usd": None,
        "monthly_budget_micros": None,
    }
    assert_error(await admin.put(url, json={"limits": {"rpm": 5}}), 428)
    set_ = await admin.put(
        url, json={"limits": {"rpm": 5, "tpm": 1000}, "monthly_budget_usd": 20}, headers=match(read)
    )
    assert set_.status_code == 200, set_.text
    assert set_.json()["monthly_budget_micros"] == 20_000_000
    assert_error(await admin.put(url, json={"limits": {"rpm": 1}}, headers=match(read)), 409)
    cleared = await admin.put(url, json={"monthly_budget_usd": 1}, headers=match(set_))
    assert cleared.json()["limits"]["rpm"] is None  # PUT replaces the whole

    key_url = f"/keys/{key['id']}/limits"
    key_read = await admin.get(key_url)
    assert_error(
        await admin.put(key_url, json={"limits": {"concurrency": 0}}, headers=match(key_read)),
        400,
        "limits.concurrency",
    )
    assert_error(await admin.put(key_url, json={"rpm": 3}, headers=match(key_read)), 400, "rpm")
    done = await admin.put(key_url, json={"limits": {"concurrency": 2}}, headers=match(key_read))
    assert done.status_code == 200, done.text
    served = (await snapshot(engine)).keys_by_digest[apikeys.digest(key["key"])]
    assert served.limits.concurrency == 2
    assert served.project.limits.monthly_budget_micros == 1_000_000
    assert_error(await admin.get("/keys/nope/limits"), 404)

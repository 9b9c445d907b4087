"""Routing policies over the real admin app: CRUD, the YAML's rules with the field named,
bindings through projects and keys, deletion refused while bound, the snapshot."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from tests.admin.support import assert_error, match, snapshot


async def test_policy_lifecycle_and_binding(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    await admin.post("/providers", json={"slug": "up", "type": "mock"})
    created = await admin.post(
        "/policies", json={"name": "eu-only", "providers": ["up"], "strategy": "fixed"}
    )
    assert created.status_code == 201, created.text
    policy = created.json()
    assert (policy["providers"], policy["tags"], policy["strategy"]) == (["up"], None, "fixed")
    assert (await admin.get("/policies")).json()["data"][0]["name"] == "eu-only"

    project = (
        await admin.post("/projects", json={"name": "acme", "routing_policy": "eu-only"})
    ).json()
    assert project["routing_policy"] == "eu-only"
    key = (await admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"})).json()
    served = (await snapshot(engine)).keys_by_digest[apikeys.digest(key["key"])]
    assert served.policy is not None and served.policy.name == "eu-only"

    renamed = await admin.patch(
        f"/policies/{policy['id']}", json={"name": "eu", "tags": ["gpu"]}, headers=match(created)
    )
    assert renamed.status_code == 200, renamed.text
    # bindings hold the id: the project follows the rename
    assert (await admin.get(f"/projects/{project['id']}")).json()["routing_policy"] == "eu"
    served = (await snapshot(engine)).keys_by_digest[apikeys.digest(key["key"])]
    assert served.policy is not None and served.policy.tags == frozenset({"gpu"})

    url = f"/policies/{policy['id']}"
    assert_error(await admin.delete(url, headers=match(renamed)), 409)
    project_read = await admin.get(f"/projects/{project['id']}")
    await admin.patch(
        f"/projects/{project['id']}", json={"routing_policy": None}, headers=match(project_read)
    )
    assert (await admin.delete(url, headers=match(renamed))).status_code == 204


async def test_policy_rules_name_the_field(admin: httpx.AsyncClient) -> None:
    assert_error(
        await admin.post("/policies", json={"name": "p", "providers": ["ghost"]}),
        400,
        "providers[0]",
    )
    assert_error(
        await admin.post("/policies", json={"name": "p", "strategy": "nope"}), 400, "strategy"
    )
    assert_error(await admin.post("/policies", json={"name": "bad/name"}), 400, "name")
    first = await admin.post("/policies", json={"name": "p"})
    assert first.status_code == 201
    assert_error(await admin.post("/policies", json={"name": "p"}), 409, "name")
    assert_error(await admin.patch(f"/policies/{first.json()['id']}", json={"tags": []}), 428)

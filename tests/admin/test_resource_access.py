"""Who may touch the resources: a tenant's users never read or change another tenant's rows,
even by id (404, never a hint that the row exists); a developer limited to some projects sees
only their keys; a viewer cannot write. And every mutation leaves an audit entry."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from tests.admin.access_support import add_tenant, add_user, audit_rows, console, fast_passwords
from tests.admin.support import assert_error, match

__all__ = ["fast_passwords"]


async def _seed(admin: httpx.AsyncClient, tenant_id: str, tag: str) -> dict[str, Any]:
    """A provider, model, policy, project and key in one tenant, made by the platform admin."""
    params = {"tenant_id": tenant_id}
    made: dict[str, Any] = {}
    made["provider"] = await admin.post(
        "/providers", params=params, json={"slug": f"up-{tag}", "type": "mock"}
    )
    made["model"] = await admin.post(
        "/models",
        params=params,
        json={"name": f"m-{tag}", "routes": [{"provider": f"up-{tag}", "upstream_model": "x"}]},
    )
    made["policy"] = await admin.post("/policies", params=params, json={"name": f"pol-{tag}"})
    made["project"] = await admin.post("/projects", params=params, json={"name": f"p-{tag}"})
    made["key"] = await admin.post(
        f"/projects/{made['project'].json()['id']}/keys", json={"name": "k"}
    )
    for response in made.values():
        assert response.status_code == 201, response.text
    return made


def _urls(made: dict[str, Any]) -> list[tuple[str, httpx.Response]]:
    return [
        (f"/providers/{made['provider'].json()['id']}", made["provider"]),
        (f"/models/{made['model'].json()['id']}", made["model"]),
        (f"/policies/{made['policy'].json()['id']}", made["policy"]),
        (f"/projects/{made['project'].json()['id']}", made["project"]),
        (f"/keys/{made['key'].json()['id']}", made["key"]),
    ]


async def test_a_tenant_never_reaches_another_tenants_rows(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    alpha, beta = await add_tenant(engine, "alpha"), await add_tenant(engine, "beta")
    mine, theirs = await _seed(admin, alpha, "a"), await _seed(admin, beta, "b")
    await add_user(engine, "lead@alpha.test", {alpha: "tenant_admin"})
    async with console(admin_state, "lead@alpha.test") as lead:
        for url, created in _urls(theirs):
            assert_error(await lead.get(url), 404)
            assert_error(await lead.patch(url, json={}, headers=match(created)), 404)
            assert_error(await lead.delete(url, headers=match(created)), 404)
        key_id = theirs["key"].json()["id"]
        assert_error(await lead.post(f"/keys/{key_id}/revoke"), 404)
        assert_error(await lead.post(f"/keys/{key_id}/rotate"), 404)
        assert_error(await lead.get(f"/keys/{key_id}/limits"), 404)
        project_id = theirs["project"].json()["id"]
        assert_error(await lead.post(f"/projects/{project_id}/keys", json={"name": "x"}), 404)
        model_id = theirs["model"].json()["id"]
        assert_error(await lead.get(f"/models/{model_id}/prices"), 404)
        assert_error(
            await lead.post("/projects", params={"tenant_id": beta}, json={"name": "x"}), 404
        )
        for url, _created in _urls(mine):
            assert (await lead.get(url)).status_code == 200, url
        for listing in ("/providers", "/models", "/policies", "/projects", "/keys"):
            tenants = {row["tenant_id"] for row in (await lead.get(listing)).json()["data"]}
            assert tenants == {alpha}, listing
        # a create without tenant_id goes to the caller's only tenant
        made = await lead.post("/projects", json={"name": "new"})
        assert made.status_code == 201, made.text
        assert made.json()["tenant_id"] == alpha
    # the other tenant's rows are untouched
    key = await admin.get(f"/keys/{theirs['key'].json()['id']}")
    assert key.json()["status"] == "active"


async def test_developer_scope_and_viewer(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "gamma")
    one = await _seed(admin, tenant, "1")
    two = (await admin.post("/projects", params={"tenant_id": tenant}, json={"name": "p-2"})).json()
    other_key = await admin.post(f"/projects/{two['id']}/keys", json={"name": "k2"})
    await add_user(
        engine,
        "dev@gamma.test",
        {tenant: "developer"},
        projects={tenant: [one["project"].json()["id"]]},
    )
    await add_user(engine, "viewer@gamma.test", {tenant: "viewer"})
    async with console(admin_state, "dev@gamma.test") as dev:
        keys = (await dev.get("/keys")).json()["data"]
        assert [k["id"] for k in keys] == [one["key"].json()["id"]]
        assert_error(await dev.get(f"/keys/{other_key.json()['id']}"), 404)
        assert_error(await dev.post(f"/projects/{two['id']}/keys", json={"name": "x"}), 404)
        mine = await dev.post(f"/projects/{one['project'].json()['id']}/keys", json={"name": "x"})
        assert mine.status_code == 201, mine.text
        assert_error(await dev.post("/projects", json={"name": "nope"}), 403)
    async with console(admin_state, "viewer@gamma.test") as viewer:
        assert (await viewer.get("/projects")).status_code == 200
        assert_error(await viewer.post("/projects", json={"name": "nope"}), 403)
        url, created = _urls(one)[0]
        assert_error(await viewer.patch(url, json={"region": "x"}, headers=match(created)), 403)


async def test_every_mutation_is_audited(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    provider = await admin.post(
        "/providers", json={"slug": "up", "type": "mock", "api_key": "sk-audited-secret-1234"}
    )
    await admin.patch(
        f"/providers/{provider.json()['id']}", json={"region": "eu"}, headers=match(provider)
    )
    project = await admin.post("/projects", json={"name": "acme"})
    key = await admin.post(f"/projects/{project.json()['id']}/keys", json={"name": "ci"})
    key_id = key.json()["id"]
    rotated = await admin.post(f"/keys/{key_id}/rotate")
    await admin.post(f"/keys/{key_id}/revoke")
    assert_error(await admin.post("/projects", json={"name": "acme"}), 409)
    rows = await audit_rows(engine)
    actions = [(r["action"], r["status_code"]) for r in rows]
    assert actions == [
        ("provider.create", 201),
        ("provider.update", 200),
        ("project.create", 201),
        ("key.create", 201),
        ("key.rotate", 200),
        ("key.revoke", 200),
        ("POST /projects", 409),
    ]
    assert rows[1]["target_id"] == provider.json()["id"]
    assert "region" in rows[1]["diff"]
    everything = repr(rows)
    for secret in ("sk-audited-secret-1234", key.json()["key"], rotated.json()["key"]):
        assert secret not in everything

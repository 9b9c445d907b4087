"""Who may touch the resources, beyond what the permission matrix (test_permission_matrix.py)
checks route by route: a refused change leaves another tenant's row as it was, and a create
without `tenant_id` goes to the caller's only tenant."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from tests.admin.access_support import add_tenant, add_user, console, fast_passwords
from tests.admin.support import assert_error, match

__all__ = ["fast_passwords"]


async def test_a_refused_change_leaves_the_other_tenants_row_as_it_was(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    alpha, beta = await add_tenant(engine, "alpha"), await add_tenant(engine, "beta")
    project = await admin.post("/projects", params={"tenant_id": beta}, json={"name": "p"})
    key = await admin.post(f"/projects/{project.json()['id']}/keys", json={"name": "k"})
    key_id = key.json()["id"]
    await add_user(engine, "lead@alpha.test", {alpha: "tenant_admin"})
    async with console(admin_state, "lead@alpha.test") as lead:
        assert_error(await lead.post(f"/keys/{key_id}/revoke"), 404)
        assert_error(await lead.post(f"/keys/{key_id}/rotate"), 404)
        assert_error(
            await lead.patch(f"/keys/{key_id}", json={"name": "x"}, headers=match(key)), 404
        )
        assert_error(await lead.delete(f"/keys/{key_id}", headers=match(key)), 404)
        # a create without tenant_id goes to the caller's only tenant
        made = await lead.post("/projects", json={"name": "new"})
        assert made.status_code == 201, made.text
        assert made.json()["tenant_id"] == alpha
    after = await admin.get(f"/keys/{key_id}")
    assert after.status_code == 200
    assert (after.json()["status"], after.json()["name"]) == ("active", "k")
    assert after.headers["ETag"] == key.headers["ETag"]

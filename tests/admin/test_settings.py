"""The gateway-wide routing setting over the real admin app: the breaker's rules name the
field, the global policy binding, If-Match, platform admin only, and the snapshot."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from tests.admin.access_support import add_tenant, add_user, console, fast_passwords
from tests.admin.support import assert_error, generation, match, snapshot

__all__ = ["fast_passwords"]


async def test_routing_setting(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    read = await admin.get("/settings/routing")
    assert read.json() == {"breaker": {}}
    assert_error(await admin.put("/settings/routing", json={}), 428)
    assert_error(
        await admin.put(
            "/settings/routing",
            json={"breaker": {"cooldown_s": 30, "max_cooldown_s": 10}},
            headers=match(read),
        ),
        400,
        "breaker",
    )
    assert_error(
        await admin.put("/settings/routing", json={"policy": "ghost"}, headers=match(read)),
        400,
        "policy",
    )
    await admin.post("/policies", json={"name": "everywhere"})
    before = await generation(engine)
    done = await admin.put(
        "/settings/routing",
        json={"breaker": {"failures": 7}, "policy": "everywhere"},
        headers=match(read),
    )
    assert done.status_code == 200, done.text
    assert done.json()["policy"] == "everywhere"
    assert done.json()["breaker"]["failures"] == 7
    assert await generation(engine) == before + 1
    assert (await snapshot(engine)).breaker.failures == 7
    assert_error(await admin.put("/settings/routing", json={}, headers=match(read)), 409)


async def test_only_the_platform_admin_changes_it(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "alpha")
    await add_user(engine, "lead@alpha.test", {tenant: "tenant_admin"})
    async with console(admin_state, "lead@alpha.test") as lead:
        read = await lead.get("/settings/routing")
        assert read.status_code == 200
        assert_error(await lead.put("/settings/routing", json={}, headers=match(read)), 403)

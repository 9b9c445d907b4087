"""Signing in and out of the console over the real admin app and database."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from tests.admin.access_support import (  # fast_passwords: autouse, cheap argon2
    add_tenant,
    add_user,
    console,
    fast_passwords,  # noqa: F401
)


async def test_login_me_logout(admin_state: AdminState, engine: AsyncEngine) -> None:
    tenant = await add_tenant(engine, "acme")
    await add_user(engine, "ann@example.com", {tenant: "viewer"})
    async with console(admin_state, "ANN@example.com ") as api:
        me = await api.get("/auth/me")
        assert me.status_code == 200, me.text
        assert me.json()["user"]["email"] == "ann@example.com"
        assert me.json()["memberships"][0]["role"] == "viewer"
        out = await api.post("/auth/logout")
        assert out.status_code == 204, out.text
        assert (await api.get("/auth/me")).status_code == 401

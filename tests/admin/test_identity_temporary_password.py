"""A password an admin sets (a new account's, an admin reset) is temporary: until the user
changes it, every admin call but the change, sign-out and who-am-I answers 403
password_change_required. Over the real admin app and database."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from tests.admin.access_support import (
    PASSWORD,
    add_tenant,
    add_user,
    audit_rows,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
)

TEMPORARY = "temporary password 7311"
CHOSEN = "the user's own passphrase 2208"


def _refused(answer: httpx.Response) -> bool:
    return (
        answer.status_code == 403
        and set(answer.json()) == {"error"}
        and answer.json()["error"]["type"] == "password_change_required"
    )


async def test_a_new_accounts_password_must_be_changed_before_anything_else(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "acme")
    await add_user(engine, "ada@example.com", {tenant: "tenant_admin"})
    async with console(admin_state, "ada@example.com") as ada:
        made = await ada.post(
            "/users", json={"email": "neo@example.com", "password": TEMPORARY, "role": "viewer"}
        )
        assert made.status_code == 201, made.text
    async with client(admin_state) as neo:
        signed_in = await login(neo, "neo@example.com", TEMPORARY)
        assert signed_in.status_code == 200, signed_in.text
        assert signed_in.json()["password_change_required"] is True
        neo.headers["X-CSRF-Token"] = signed_in.json()["csrf_token"]
        me = await neo.get("/auth/me")
        assert me.status_code == 200 and me.json()["password_change_required"] is True
        for method, path in (
            ("GET", f"/tenants/{tenant}"),
            ("GET", "/projects"),
            ("GET", "/auth/sessions"),
            ("POST", "/auth/sessions/revoke-others"),
            ("POST", "/auth/totp/setup"),
        ):
            assert _refused(await neo.request(method, path)), (method, path)
        changed = await neo.post(
            "/auth/password", json={"current_password": TEMPORARY, "new_password": CHOSEN}
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["password_change_required"] is False
        neo.headers["X-CSRF-Token"] = changed.json()["csrf_token"]
        assert (await neo.get(f"/tenants/{tenant}")).status_code == 200
        assert (await neo.get("/auth/sessions")).status_code == 200
    async with client(admin_state) as neo:
        again = await login(neo, "neo@example.com", CHOSEN)
        assert again.json()["password_change_required"] is False


async def test_sign_out_works_before_the_change(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    async with client(admin_state, Authorization="Bearer " + _token()) as admin:
        made = await admin.post("/users", json={"email": "neo@example.com", "password": TEMPORARY})
        assert made.status_code == 201, made.text
    async with console(admin_state, "neo@example.com", TEMPORARY) as neo:
        assert _refused(await neo.get("/users"))
        assert (await neo.post("/auth/logout")).status_code == 204
        assert (await neo.get("/auth/me")).status_code == 401


def _token() -> str:
    from tests.admin.conftest import ADMIN_TOKEN

    return ADMIN_TOKEN


async def test_an_admin_reset_ends_the_sessions_and_is_temporary(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme, globex = await add_tenant(engine, "acme"), await add_tenant(engine, "globex")
    member = await add_user(engine, "mia@example.com", {acme: "developer"})
    ada = await add_user(engine, "ada@example.com", {acme: "tenant_admin"})
    await add_user(engine, "val@example.com", {acme: "viewer"})
    await add_user(engine, "gus@example.com", {globex: "tenant_admin"})
    body = {"password": TEMPORARY}
    async with (
        console(admin_state, "mia@example.com") as mia,
        console(admin_state, "ada@example.com") as admin,
        console(admin_state, "val@example.com") as val,
        console(admin_state, "gus@example.com") as gus,
    ):
        assert (await val.post(f"/users/{member}/password", json=body)).status_code == 403
        assert (await gus.post(f"/users/{member}/password", json=body)).status_code == 404
        short = await admin.post(f"/users/{member}/password", json={"password": "short"})
        assert short.status_code == 400 and short.json()["error"]["field"] == "password"
        own = await admin.post(f"/users/{ada}/password", json=body)
        assert own.status_code == 400, own.text
        assert (await mia.get("/auth/me")).status_code == 200
        reset = await admin.post(f"/users/{member}/password", json=body)
        assert reset.status_code == 204, reset.text
        assert (await mia.get("/auth/me")).status_code == 401  # signed out everywhere
    entries = await audit_rows(engine, action="user.password_set", status_code=204)
    assert [e["target_id"] for e in entries] == [member]
    assert TEMPORARY not in str(entries)
    async with client(admin_state) as mia:
        assert (await login(mia, "mia@example.com", PASSWORD)).status_code == 401
    async with console(admin_state, "mia@example.com", TEMPORARY) as mia:
        assert _refused(await mia.get("/projects"))
        changed = await mia.post(
            "/auth/password", json={"current_password": TEMPORARY, "new_password": CHOSEN}
        )
        assert changed.status_code == 200, changed.text
        mia.headers["X-CSRF-Token"] = changed.json()["csrf_token"]
        assert (await mia.get("/projects")).status_code == 200

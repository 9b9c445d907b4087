"""Tenants, users and memberships over the real admin app and database: who may create and
change what, cursor pages, optimistic concurrency (If-Match or `version`, 428 / 409)."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from tests.admin.access_support import (
    PASSWORD,
    add_project,
    add_tenant,
    add_user,
    audit_rows,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
)
from tests.admin.support import assert_error, walk_pages


async def test_platform_admin_creates_and_pages_tenants(admin: httpx.AsyncClient) -> None:
    for n in range(3):
        created = await admin.post("/tenants", json={"slug": f"t{n}", "name": f"T{n}"})
        assert created.status_code == 201, created.text
        assert created.headers["ETag"] == '"1"'
    assert_error(await admin.post("/tenants", json={"slug": "t0", "name": "again"}), 409, "slug")
    assert_error(await admin.post("/tenants", json={"slug": "Bad Slug", "name": "x"}), 400, "slug")
    seen = [t["slug"] for page in await walk_pages(admin, "/tenants", limit=2) for t in page]
    assert sorted(seen) == ["t0", "t1", "t2"] and len(seen) == 3


async def test_updates_need_the_version_read(admin: httpx.AsyncClient) -> None:
    tenant = (await admin.post("/tenants", json={"slug": "acme", "name": "Acme"})).json()
    path = f"/tenants/{tenant['id']}"
    assert_error(await admin.patch(path, json={"name": "X"}), 428)
    assert_error(await admin.patch(path, json={"name": "X"}, headers={"If-Match": '"7"'}), 409)
    assert_error(await admin.patch(path, json={"name": "X", "version": 7}), 409)
    first = await admin.patch(path, json={"require_2fa": True}, headers={"If-Match": '"1"'})
    assert first.status_code == 200, first.text
    assert first.json()["require_2fa"] is True and first.headers["ETag"] == '"2"'
    # a second admin still holding version 1 cannot overwrite silently
    assert_error(await admin.patch(path, json={"name": "Mine"}, headers={"If-Match": '"1"'}), 409)
    second = await admin.patch(path, json={"name": "Acme Inc", "version": 2})
    assert second.status_code == 200 and second.json()["name"] == "Acme Inc"


async def test_tenant_admin_manages_its_members(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme = await add_tenant(engine, "acme")
    other = await add_tenant(engine, "other")
    project = await add_project(engine, acme, "web")
    foreign_project = await add_project(engine, other, "x")
    await add_user(engine, "boss@example.com", {acme: "tenant_admin"})
    outsider = await add_user(engine, "out@example.com", {other: "viewer"})
    async with console(admin_state, "boss@example.com") as api:
        created = await api.post(
            "/users",
            json={
                "email": "Dev@Example.com",
                "password": "a good long password",
                "role": "developer",
                "project_ids": [project],
            },
        )
        assert created.status_code == 201, created.text
        dev = created.json()
        assert dev["email"] == "dev@example.com"
        assert dev["memberships"] == [
            {
                "user_id": dev["id"],
                "tenant_id": acme,
                "email": "dev@example.com",
                "role": "developer",
                "project_ids": [project],
                "version": 1,
            }
        ]
        assert "password" not in created.text
        assert_error(
            await api.post(
                "/users", json={"email": "x@example.com", "password": "short", "role": "viewer"}
            ),
            400,
            "password",
        )
        assert_error(
            await api.post(
                "/users",
                json={"email": "dev@example.com", "password": PASSWORD, "role": "viewer"},
            ),
            409,
            "email",
        )
        assert_error(
            await api.post(
                "/users",
                json={"email": "p@example.com", "password": PASSWORD, "platform_admin": True},
            ),
            403,
        )
        assert_error(
            await api.post(
                "/users",
                json={
                    "email": "q@example.com",
                    "password": PASSWORD,
                    "role": "developer",
                    "project_ids": [foreign_project],
                },
            ),
            400,
            "project_ids[0]",
        )

        members = (await api.get(f"/tenants/{acme}/members")).json()["data"]
        assert {m["email"] for m in members} == {"boss@example.com", "dev@example.com"}
        listed = (await api.get("/users")).json()["data"]
        assert {u["email"] for u in listed} == {"boss@example.com", "dev@example.com"}
        assert_error(await api.get(f"/users/{outsider}"), 404)  # another tenant's user

        path = f"/tenants/{acme}/members/{dev['id']}"
        assert_error(await api.patch(path, json={"role": "viewer"}), 428)
        promoted = await api.patch(
            path, json={"role": "billing", "all_projects": True, "version": 1}
        )
        assert promoted.status_code == 200, promoted.text
        assert promoted.json()["role"] == "billing" and promoted.json()["project_ids"] is None
        assert_error(
            await api.patch(path, json={"role": "platform_admin", "version": 2}), 400, "role"
        )

        # an account of another tenant can be added by email, once
        added = await api.post(
            f"/tenants/{acme}/members", json={"email": "out@example.com", "role": "viewer"}
        )
        assert added.status_code == 201, added.text
        assert_error(
            await api.post(
                f"/tenants/{acme}/members", json={"user_id": outsider, "role": "viewer"}
            ),
            409,
        )
        # but not changed as a whole: it belongs to a tenant this admin does not run
        assert_error(
            await api.patch(f"/users/{outsider}", json={"disabled": True, "version": 1}), 403
        )
        assert (await api.delete(f"/tenants/{acme}/members/{outsider}")).status_code == 204
        assert_error(await api.delete(f"/tenants/{acme}/members/{outsider}"), 404)

        # and nothing at all in the other tenant
        assert_error(await api.get(f"/tenants/{other}/members"), 404)
        assert_error(
            await api.post(
                f"/tenants/{other}/members", json={"user_id": dev["id"], "role": "viewer"}
            ),
            404,
        )
        disabled = await api.patch(f"/users/{dev['id']}", json={"disabled": True, "version": 1})
        assert disabled.status_code == 200, disabled.text
        assert disabled.json()["disabled"] is True
        me = (await api.get("/auth/me")).json()["user"]["id"]
        assert_error(
            await api.patch(f"/users/{me}", json={"disabled": True, "version": 1}), 400, "disabled"
        )
    async with console(admin_state, "boss@example.com") as api:
        assert (await login(api, "dev@example.com", "a good long password")).status_code == 403


async def test_a_developer_sees_only_its_projects_usage(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme = await add_tenant(engine, "acme")
    mine = await add_project(engine, acme, "mine")
    await add_project(engine, acme, "theirs")
    await add_user(engine, "dev@example.com", {acme: "developer"}, projects={acme: [mine]})
    async with console(admin_state, "dev@example.com") as api:
        me = (await api.get("/auth/me")).json()
        assert me["memberships"][0]["project_ids"] == [mine]
        assert (await api.get("/usage/summary", params={"project": "mine"})).status_code == 200
        assert_error(await api.get("/usage/summary", params={"project": "theirs"}), 400, "project")


async def test_a_nul_character_is_never_a_server_error(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    """A NUL in a name is refused (400) on both databases by the schema; PostgreSQL refuses
    one in any other text (an id, an email looked up): a 400 too, and the attempt is still
    audited. (SQLite stores it: there those calls simply find nothing.)"""
    postgres = engine.dialect.name == "postgresql"
    created = await admin.post("/tenants", json={"slug": "ok", "name": "a\x00b"})
    assert_error(created, 400, "name")
    assert (await admin.get("/tenants/a%00b")).status_code == (400 if postgres else 404)
    assert (await admin.get("/audit", params={"actor": "a\x00b"})).status_code in (200, 400)
    async with client(admin_state) as anonymous:
        login = await anonymous.post(
            "/auth/login", json={"email": "a\x00@example.com", "password": "whatever it is"}
        )
    assert login.status_code == (400 if postgres else 401), login.text
    rows = await audit_rows(engine)
    assert [r["action"] for r in rows] == ["POST /tenants", "auth.login"]
    if postgres:
        assert rows[1]["actor_email"] == "a\\0@example.com"

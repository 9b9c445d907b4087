"""The audit log: one entry per authenticated state-changing admin request, failures included,
with secrets masked; and reading it back through GET /audit, tenant by tenant."""

from __future__ import annotations

import ipaddress
import json

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from llmrelay.admin.app import create_admin
from llmrelay.admin.audit import MASK
from llmrelay.admin.state import AdminState
from llmrelay.gateway.ingress import IngressMiddleware
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
from tests.admin.conftest import ADMIN_TOKEN


async def test_a_change_is_audited_with_who_what_and_where(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "acme")
    boss = await add_user(engine, "boss@example.com", {tenant: "tenant_admin"})
    async with console(admin_state, "boss@example.com") as api:
        api.headers["User-Agent"] = "console-test/1.0"
        changed = await api.patch(
            f"/tenants/{tenant}",
            json={"name": "Acme Inc", "version": 1},
            headers={"x-request-id": "req-audit-1"},
        )
        assert changed.status_code == 200, changed.text
        await api.get(f"/tenants/{tenant}")  # reads leave no entry
    rows = [r for r in await audit_rows(engine) if r["action"] != "auth.login"]
    assert len(rows) == 1
    row = rows[0]
    assert row["actor_kind"] == "user"
    assert row["actor_id"] == boss and row["actor_email"] == "boss@example.com"
    assert row["role"] == "tenant_admin" and row["tenant_id"] == tenant
    assert (row["action"], row["target_type"], row["target_id"]) == (
        "tenant.update",
        "tenant",
        tenant,
    )
    assert row["status_code"] == 200 and row["request_id"] == "req-audit-1"
    assert row["ip"] == "127.0.0.1" and row["user_agent"] == "console-test/1.0"
    recorded = row["diff"] if isinstance(row["diff"], dict) else json.loads(row["diff"])
    assert recorded["name"] == {"before": "Acme", "after": "Acme Inc"}
    assert recorded["version"] == {"before": 1, "after": 2}


async def test_failures_are_audited_too(admin_state: AdminState, engine: AsyncEngine) -> None:
    tenant = await add_tenant(engine, "acme")
    await add_user(engine, "boss@example.com", {tenant: "tenant_admin"})
    await add_user(engine, "vera@example.com", {tenant: "viewer"})
    async with console(admin_state, "boss@example.com") as api:
        assert (await api.patch(f"/tenants/{tenant}", json={"name": "X"})).status_code == 428
        assert (
            await api.patch(f"/tenants/{tenant}", json={"name": "X", "version": 9})
        ).status_code == 409
        assert (await api.patch(f"/tenants/{tenant}", json={"name": ""})).status_code == 400
        assert (await api.post("/tenants", json={"slug": "new", "name": "New"})).status_code == 403
        stray = await api.patch(
            f"/tenants/{tenant}", json={"name": "X"}, headers={"X-CSRF-Token": "no"}
        )
        assert stray.status_code == 403
    async with console(admin_state, "vera@example.com") as api:
        assert (
            await api.patch(f"/tenants/{tenant}", json={"name": "X", "version": 1})
        ).status_code == 403
    async with client(admin_state) as api:  # no credentials: nobody to attribute it to
        assert (await api.patch(f"/tenants/{tenant}", json={"name": "X"})).status_code == 401
    rows = [r for r in await audit_rows(engine) if r["action"] != "auth.login"]
    assert [(r["actor_email"], r["status_code"]) for r in rows] == [
        ("boss@example.com", 428),
        ("boss@example.com", 409),
        ("boss@example.com", 400),
        ("boss@example.com", 403),
        ("boss@example.com", 403),  # the wrong CSRF token
        ("vera@example.com", 403),
    ]
    # filed under the tenant the path names; creating a tenant names none
    assert [r["tenant_id"] for r in rows] == [tenant, tenant, tenant, None, tenant, tenant]
    assert rows[-1]["role"] == "viewer"
    assert rows[-1]["action"] == "PATCH /tenants/{tenant_id}"  # refused before the handler ran


async def test_secrets_never_reach_the_log(admin_state: AdminState, engine: AsyncEngine) -> None:
    tenant = await add_tenant(engine, "acme")
    await add_user(engine, "boss@example.com", {tenant: "tenant_admin"})
    new_password = "an entirely new passphrase"
    async with console(admin_state, "boss@example.com") as api:
        created = await api.post(
            "/users",
            json={
                "email": "new@example.com",
                "password": "the new user's password",
                "role": "viewer",
            },
        )
        assert created.status_code == 201, created.text
        changed = await api.post(
            "/auth/password", json={"current_password": PASSWORD, "new_password": new_password}
        )
        assert changed.status_code == 200
    async with client(admin_state) as api:
        assert (await login(api, "boss@example.com", "a wrong guess!")).status_code == 401
    rows = await audit_rows(engine)
    text = json.dumps([{k: str(v) for k, v in r.items()} for r in rows])
    for secret in (PASSWORD, new_password, "the new user's password", "a wrong guess!"):
        assert secret not in text
    by_action = {r["action"]: r for r in rows}
    created_diff = by_action["user.create"]["diff"]
    created_diff = created_diff if isinstance(created_diff, dict) else json.loads(created_diff)
    assert created_diff["password"] == {"after": MASK}
    assert created_diff["email"] == {"after": "new@example.com"}
    assert by_action["user.create"]["tenant_id"] == tenant
    password_diff = by_action["user.password_change"]["diff"]
    password_diff = password_diff if isinstance(password_diff, dict) else json.loads(password_diff)
    assert password_diff == {"password": {"before": MASK, "after": MASK}}
    logins = [(r["actor_kind"], r["status_code"]) for r in rows if r["action"] == "auth.login"]
    assert logins == [("anonymous", 200), ("anonymous", 401)]


async def test_reading_the_log_is_tenant_scoped_filtered_and_paged(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme = await add_tenant(engine, "acme")
    other = await add_tenant(engine, "other")
    await add_user(engine, "audi@example.com", {acme: "auditor"})
    await add_user(engine, "vera@example.com", {acme: "viewer"})
    async with client(admin_state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin:
        for n in range(3):
            answer = await admin.patch(
                f"/tenants/{acme}", json={"name": f"Acme {n}", "version": n + 1}
            )
            assert answer.status_code == 200
        assert (
            await admin.patch(f"/tenants/{other}", json={"name": "O", "version": 1})
        ).status_code == 200
        everything = (await admin.get("/audit")).json()["data"]
        assert {r["tenant_id"] for r in everything} >= {acme, other}
        assert all(r["actor_kind"] == "token" and r["role"] == "platform_admin" for r in everything)

    async with console(admin_state, "audi@example.com") as api:
        seen = (await api.get("/audit")).json()
        assert {r["tenant_id"] for r in seen["data"]} == {acme}  # never another tenant's
        assert [r["diff"]["name"]["after"] for r in seen["data"]] == ["Acme 2", "Acme 1", "Acme 0"]
        first = (await api.get("/audit", params={"limit": 2})).json()
        assert len(first["data"]) == 2 and first["next_cursor"]
        rest = (await api.get("/audit", params={"limit": 2, "cursor": first["next_cursor"]})).json()
        assert [r["id"] for r in first["data"] + rest["data"]] == [r["id"] for r in seen["data"]]
        assert rest["next_cursor"] is None
        assert (await api.get("/audit", params={"action": "tenant.*"})).json()["data"] == seen[
            "data"
        ]
        assert (await api.get("/audit", params={"action": "user.create"})).json()["data"] == []
        assert (await api.get("/audit", params={"target": other})).json()["data"] == []
        assert len((await api.get("/audit", params={"target": acme})).json()["data"]) == 3
        assert (await api.get("/audit", params={"actor": "nobody@example.com"})).json()[
            "data"
        ] == []
        future = (await api.get("/audit", params={"since": "2999-01-01T00:00:00"})).json()
        assert future["data"] == []
        for cursor in ("!!", "OTk5OTk5OTk5OTk5OTk5OTk5OTk5", "LTE"):  # junk, 10**21, -1
            bad = await api.get("/audit", params={"cursor": cursor})
            assert bad.status_code == 400 and bad.json()["error"]["field"] == "cursor"
    async with console(admin_state, "vera@example.com") as api:
        refused = await api.get("/audit")
        assert refused.status_code == 403  # viewers read everything but the audit log


async def test_a_server_side_failure_is_audited(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    """The entry is written with the status the client got (here the sealer is missing)."""
    await add_user(engine, "ann@example.com", platform_admin=True)
    admin_state.sealer = None
    async with console(admin_state, "ann@example.com") as api:
        answer = await api.post("/auth/totp/setup")
        assert answer.status_code == 503  # a handled error: the state says what is missing
    rows = [r for r in await audit_rows(engine) if r["action"] == "user.totp_setup"]
    assert [r["status_code"] for r in rows] == [503]


async def test_behind_the_ingress_the_entry_has_its_request_id_and_client_address(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    """Mounted as llmrelay.app mounts it (ingress, then /api/admin): the entry carries the
    request id the ingress gave the response, and the client address it believed."""
    tenant = await add_tenant(engine, "acme")
    app = Starlette(
        routes=[Mount("/api/admin", app=create_admin(admin_state))],
        middleware=[
            Middleware(
                IngressMiddleware,
                max_body_bytes=1 << 20,
                trusted_proxies=[ipaddress.ip_network("127.0.0.0/8")],
            )
        ],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://admin/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    ) as api:
        answer = await api.patch(
            f"/tenants/{tenant}",
            json={"name": "Via ingress", "version": 1},
            headers={"X-Forwarded-For": "203.0.113.9", "X-Request-ID": "not a valid id!" * 9},
        )
        assert answer.status_code == 200, answer.text
    request_id = answer.headers["x-request-id"]
    assert request_id and " " not in request_id  # the ingress replaced the malformed one
    (row,) = await audit_rows(engine, action="tenant.update")
    assert row["request_id"] == request_id
    assert row["ip"] == "203.0.113.9"
    assert row["actor_kind"] == "token" and row["role"] == "platform_admin"

"""A user's own sessions (list, end one, end the others) and an admin's view of a member's
sessions, over the real admin app and database."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from tests.admin.access_support import (
    add_tenant,
    add_user,
    audit_rows,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
)


async def _signed_in(state: AdminState, email: str, agent: str) -> httpx.AsyncClient:
    api = client(state, **{"User-Agent": agent})
    answer = await login(api, email)
    assert answer.status_code == 200, answer.text
    api.headers["X-CSRF-Token"] = answer.json()["csrf_token"]
    return api


async def test_a_user_lists_its_sessions_and_ends_one_and_the_others(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "acme")
    user_id = await add_user(engine, "ann@example.com", {tenant: "viewer"})
    await add_user(engine, "bob@example.com", {tenant: "viewer"})
    laptop = await _signed_in(admin_state, "ann@example.com", "laptop-browser/1")
    phone = await _signed_in(admin_state, "ann@example.com", "phone-browser/2")
    tablet = await _signed_in(admin_state, "ann@example.com", "tablet-browser/3")
    bob = await _signed_in(admin_state, "bob@example.com", "bob-browser/1")
    try:
        listed = await laptop.get("/auth/sessions")
        assert listed.status_code == 200, listed.text
        rows = listed.json()["data"]
        assert {r["user_agent"] for r in rows} == {
            "tablet-browser/3",
            "phone-browser/2",
            "laptop-browser/1",
        }
        assert [r["current"] for r in rows if r["user_agent"] == "laptop-browser/1"] == [True]
        assert sum(r["current"] for r in rows) == 1
        assert all(r["ip"] and r["created_at"].endswith("Z") and r["last_seen_at"] for r in rows)
        assert not {"token", "token_digest", "csrf_token"} & set(rows[0])
        phone_id = next(r["id"] for r in rows if r["user_agent"] == "phone-browser/2")

        # another user's session is not found (never ended)
        foreign = await bob.delete(f"/auth/sessions/{phone_id}")
        assert foreign.status_code == 404 and set(foreign.json()) == {"error"}
        assert (await phone.get("/auth/me")).status_code == 200

        # ending one needs the CSRF token, like every state-changing call
        no_csrf = await laptop.delete(
            f"/auth/sessions/{phone_id}", headers={"X-CSRF-Token": "wrong"}
        )
        assert no_csrf.status_code == 403
        ended = await laptop.delete(f"/auth/sessions/{phone_id}")
        assert ended.status_code == 204, ended.text
        assert (await phone.get("/auth/me")).status_code == 401
        assert (await laptop.delete(f"/auth/sessions/{phone_id}")).status_code == 404
        entries = await audit_rows(engine, action="session.revoke", status_code=204)
        assert [e["target_id"] for e in entries] == [phone_id]

        others = await laptop.post("/auth/sessions/revoke-others")
        assert others.status_code == 200 and others.json() == {"revoked": 1}
        assert (await tablet.get("/auth/me")).status_code == 401
        assert (await laptop.get("/auth/me")).status_code == 200
        left = (await laptop.get("/auth/sessions")).json()["data"]
        assert [r["current"] for r in left] == [True]
        assert (await bob.get("/auth/me")).status_code == 200  # other users untouched

        # ending the current session signs out
        current = left[0]["id"]
        assert (await laptop.delete(f"/auth/sessions/{current}")).status_code == 204
        assert (await laptop.get("/auth/me")).status_code == 401
        assert await audit_rows(engine, action="user.sessions_revoke", target_id=user_id)
    finally:
        for api in (laptop, phone, tablet, bob):
            await api.aclose()


async def test_admins_see_and_end_a_members_sessions_within_their_role(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme, globex = await add_tenant(engine, "acme"), await add_tenant(engine, "globex")
    member = await add_user(engine, "mia@example.com", {acme: "developer"})
    await add_user(engine, "ada@example.com", {acme: "tenant_admin"})
    await add_user(engine, "val@example.com", {acme: "viewer"})
    await add_user(engine, "gus@example.com", {globex: "tenant_admin"})
    async with (
        console(admin_state, "mia@example.com") as mia,
        console(admin_state, "ada@example.com") as ada,
        console(admin_state, "val@example.com") as val,
        console(admin_state, "gus@example.com") as gus,
    ):
        seen = await ada.get(f"/users/{member}/sessions")
        assert seen.status_code == 200, seen.text
        assert len(seen.json()["data"]) == 1 and not seen.json()["data"][0]["current"]
        assert (await gus.get(f"/users/{member}/sessions")).status_code == 404
        assert (await val.delete(f"/users/{member}/sessions")).status_code == 403
        assert (await gus.delete(f"/users/{member}/sessions")).status_code == 404
        assert (await mia.get("/auth/me")).status_code == 200
        ended = await ada.delete(f"/users/{member}/sessions")
        assert ended.status_code == 200 and ended.json() == {"revoked": 1}
        assert (await mia.get("/auth/me")).status_code == 401
        assert (await ada.get(f"/users/{member}/sessions")).json()["data"] == []


async def test_the_admin_token_has_no_sessions_of_its_own(admin_state: AdminState) -> None:
    from tests.admin.conftest import ADMIN_TOKEN

    async with client(admin_state, Authorization=f"Bearer {ADMIN_TOKEN}") as api:
        assert (await api.get("/auth/sessions")).status_code == 400
        assert (await api.post("/auth/sessions/revoke-others")).status_code == 400

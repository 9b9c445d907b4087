"""Console sessions over the real admin app and database: the cookie, CSRF, fixation,
revocation (password change, member removal, disabled account) and expiry."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.access import SESSION_COOKIE
from llmrelay.admin.identity import credentials
from llmrelay.admin.state import AdminState, SessionPolicy
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import ConsoleSession
from llmrelay.store.types import utcnow
from tests.admin.access_support import (
    PASSWORD,
    add_tenant,
    add_user,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
)
from tests.admin.conftest import ADMIN_TOKEN


async def _live_sessions(engine: AsyncEngine, user_id: str) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT count(*) FROM console_sessions WHERE user_id = :u AND revoked_at IS NULL"),
            {"u": user_id},
        )
        return int(found.scalar_one())


async def test_the_cookie_is_httponly_lax_and_secure_in_production(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    await add_user(engine, "ann@example.com", platform_admin=True)
    async with client(admin_state) as api:
        answer = await login(api, "ann@example.com")
        assert answer.status_code == 200, answer.text
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=")
        attributes = {part.strip().lower() for part in cookie.split(";")}
        assert {"httponly", "samesite=lax", "path=/"} <= attributes
        assert "secure" not in attributes
        assert answer.json()["csrf_token"]
        # only a digest is stored: the cookie's token is nowhere in the database
        token = api.cookies[SESSION_COOKIE]
        async with engine.connect() as conn:
            stored = (await conn.execute(text("SELECT token_digest FROM console_sessions"))).all()
        assert [row[0] for row in stored] == [credentials.digest(token)]

    admin_state.sessions = SessionPolicy(secure_cookies=True)
    async with client(admin_state) as api:
        answer = await login(api, "ann@example.com")
        assert "secure" in {p.strip().lower() for p in answer.headers["set-cookie"].split(";")}


async def test_wrong_password_and_unknown_email_answer_alike(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    await add_user(engine, "ann@example.com")
    async with client(admin_state) as api:
        wrong = await login(api, "ann@example.com", "not the password at all")
        unknown = await login(api, "nobody@example.com", "not the password at all")
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()
    assert SESSION_COOKIE not in wrong.headers.get("set-cookie", "")


async def test_state_changing_calls_need_the_csrf_token(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "acme")
    await add_user(engine, "ann@example.com", {tenant: "tenant_admin"})
    async with console(admin_state, "ann@example.com") as api:
        csrf = api.headers.pop("X-CSRF-Token")
        body = {"name": "Renamed", "version": 1}
        missing = await api.patch(f"/tenants/{tenant}", json=body)
        assert missing.status_code == 403, missing.text
        assert missing.json()["error"]["type"] == "csrf_failed"
        wrong = await api.patch(f"/tenants/{tenant}", json=body, headers={"X-CSRF-Token": "x" * 43})
        assert wrong.status_code == 403 and wrong.json()["error"]["type"] == "csrf_failed"
        # reads need none
        assert (await api.get(f"/tenants/{tenant}")).status_code == 200
        right = await api.patch(f"/tenants/{tenant}", json=body, headers={"X-CSRF-Token": csrf})
        assert right.status_code == 200, right.text
        assert right.json()["name"] == "Renamed"
    # the bearer token needs none (and no cookie)
    async with client(admin_state, Authorization=f"Bearer {ADMIN_TOKEN}") as api:
        answer = await api.patch(f"/tenants/{tenant}", json={"name": "Again", "version": 2})
        assert answer.status_code == 200, answer.text


async def test_a_wrong_bearer_token_is_refused(admin_state: AdminState) -> None:
    async with client(admin_state, Authorization="Bearer not-the-token") as api:
        answer = await api.get("/tenants")
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"


async def test_login_never_adopts_a_cookie_and_rotates_the_session(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    user_id = await add_user(engine, "ann@example.com", platform_admin=True)
    async with client(admin_state) as api:
        planted = "attacker-chosen-session-value-0123456789abc"
        first = await api.post(
            "/auth/login",
            json={"email": "ann@example.com", "password": PASSWORD},
            headers={"Cookie": f"{SESSION_COOKIE}={planted}"},
        )
        assert first.status_code == 200
        token = api.cookies[SESSION_COOKIE]
        assert token != planted
        async with engine.connect() as conn:
            digests = {
                r[0] for r in await conn.execute(text("SELECT token_digest FROM console_sessions"))
            }
        assert credentials.digest(planted) not in digests
        # signing in again gives a new session and ends the one the cookie named
        second = await login(api, "ann@example.com")
        assert second.status_code == 200
        assert api.cookies[SESSION_COOKIE] != token
        assert second.json()["csrf_token"] != first.json()["csrf_token"]
        assert await _live_sessions(engine, user_id) == 1
    async with client(admin_state) as old:
        old.cookies.set(SESSION_COOKIE, token)
        assert (await old.get("/auth/me")).status_code == 401


async def test_a_password_change_ends_every_session_and_answers_a_fresh_one(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    user_id = await add_user(engine, "ann@example.com", platform_admin=True)
    new_password = "a completely different passphrase"
    async with (
        console(admin_state, "ann@example.com") as other,
        console(admin_state, "ann@example.com") as api,
    ):
        old_token = api.cookies[SESSION_COOKIE]
        too_short = await api.post(
            "/auth/password", json={"current_password": PASSWORD, "new_password": "short"}
        )
        assert too_short.status_code == 400 and too_short.json()["error"]["field"] == "new_password"
        wrong = await api.post(
            "/auth/password",
            json={"current_password": "wrong password!", "new_password": new_password},
        )
        assert wrong.status_code == 403
        changed = await api.post(
            "/auth/password", json={"current_password": PASSWORD, "new_password": new_password}
        )
        assert changed.status_code == 200, changed.text
        assert api.cookies[SESSION_COOKIE] != old_token
        api.headers["X-CSRF-Token"] = changed.json()["csrf_token"]
        assert (await other.get("/auth/me")).status_code == 401
        assert (await api.get("/auth/me")).status_code == 200
        assert await _live_sessions(engine, user_id) == 1
    async with client(admin_state) as api:
        assert (await login(api, "ann@example.com")).status_code == 401
        assert (await login(api, "ann@example.com", new_password)).status_code == 200


async def test_removal_from_a_tenant_ends_the_members_sessions(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "acme")
    await add_user(engine, "boss@example.com", {tenant: "tenant_admin"})
    member = await add_user(engine, "ann@example.com", {tenant: "viewer"})
    async with (
        console(admin_state, "ann@example.com") as ann,
        console(admin_state, "boss@example.com") as boss,
    ):
        assert (await ann.get(f"/tenants/{tenant}")).status_code == 200
        removed = await boss.delete(f"/tenants/{tenant}/members/{member}")
        assert removed.status_code == 204, removed.text
        assert (await ann.get("/auth/me")).status_code == 401
        assert await _live_sessions(engine, member) == 0


async def test_a_disabled_user_is_signed_out_and_cannot_sign_in(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "acme")
    member = await add_user(engine, "ann@example.com", {tenant: "viewer"})
    async with (
        console(admin_state, "ann@example.com") as ann,
        client(admin_state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin,
    ):
        disabled = await admin.patch(f"/users/{member}", json={"disabled": True, "version": 1})
        assert disabled.status_code == 200, disabled.text
        assert (await ann.get("/auth/me")).status_code == 401
        refused = await login(ann, "ann@example.com")
        assert refused.status_code == 403
        assert refused.json()["error"]["type"] == "account_disabled"


async def test_sessions_expire_when_idle_and_at_their_absolute_end(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    admin_state.sessions = SessionPolicy(idle_s=600, absolute_s=3600)
    user_id = await add_user(engine, "ann@example.com", platform_admin=True)

    async def age(**moved: timedelta) -> None:
        now = utcnow()
        async with session_factory(engine)() as session:
            values = {name: now - delta for name, delta in moved.items()}
            await session.execute(
                update(ConsoleSession).where(ConsoleSession.user_id == user_id).values(**values)
            )
            await session.commit()

    async with console(admin_state, "ann@example.com") as api:
        await age(last_seen_at=timedelta(seconds=599))
        assert (await api.get("/auth/me")).status_code == 200  # and that refreshes last seen
        await age(last_seen_at=timedelta(seconds=601))
        assert (await api.get("/auth/me")).status_code == 401
    async with console(admin_state, "ann@example.com") as api:
        await age(expires_at=timedelta(seconds=1))  # busy, but past its absolute end
        assert (await api.get("/auth/me")).status_code == 401
    async with console(admin_state, "ann@example.com") as api:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT created_at, expires_at FROM console_sessions"
                        " ORDER BY created_at DESC"
                    )
                )
            ).first()
        assert row is not None
        created, expires = row
        if isinstance(created, str):  # SQLite through text(): no type processing
            return
        assert abs((expires - created).total_seconds() - 3600) < 5


async def test_logout_needs_csrf_and_ends_the_session(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    user_id = await add_user(engine, "ann@example.com", platform_admin=True)
    async with console(admin_state, "ann@example.com") as api:
        csrf = api.headers.pop("X-CSRF-Token")
        assert (await api.post("/auth/logout")).status_code == 403
        out = await api.post("/auth/logout", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 204
        assert f'{SESSION_COOKIE}=""' in out.headers["set-cookie"]
    assert await _live_sessions(engine, user_id) == 0


async def test_no_credentials_is_401(anonymous: httpx.AsyncClient) -> None:
    for path in ("/auth/me", "/tenants", "/users", "/audit", "/usage/summary"):
        answer = await anonymous.get(path)
        assert answer.status_code == 401, path
        assert answer.json()["error"]["type"] == "authentication_error"

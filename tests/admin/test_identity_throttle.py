"""Sign-in throttling per account and per client IP, kept in the database (so it holds across
replicas), over the real admin app."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState, SessionPolicy
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import LoginFailure
from llmrelay.store.types import utcnow
from tests.admin.access_support import (
    add_user,
    client,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
)


async def test_an_account_is_throttled_after_five_failures(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    await add_user(engine, "ann@example.com")
    async with client(admin_state) as api:
        for _ in range(5):
            assert (await login(api, "ann@example.com", "wrong password!")).status_code == 401
        throttled = await login(api, "ann@example.com")  # even the right password
        assert throttled.status_code == 429, throttled.text
        assert throttled.json()["error"]["type"] == "rate_limited"
        assert 1 <= int(throttled.headers["Retry-After"]) <= 900
        # another account from the same address is not throttled by this one
        await add_user(engine, "bob@example.com")
        assert (await login(api, "bob@example.com")).status_code == 200

    # the window passes: the account signs in again, and success clears its failures
    async with session_factory(engine)() as session:
        await session.execute(update(LoginFailure).values(at=utcnow() - timedelta(minutes=16)))
        await session.commit()
    async with client(admin_state) as api:
        assert (await login(api, "ann@example.com")).status_code == 200
    async with engine.connect() as conn:
        left = await conn.execute(
            text("SELECT count(*) FROM login_failures WHERE email = 'ann@example.com'")
        )
        assert left.scalar_one() == 0


async def test_an_address_is_throttled_across_accounts(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    admin_state.sessions = SessionPolicy(max_failures_per_account=100, max_failures_per_ip=4)
    await add_user(engine, "ann@example.com")
    async with client(admin_state) as api:
        for n in range(4):  # unknown accounts count too
            assert (await login(api, f"guess{n}@example.com", "password guess")).status_code == 401
        throttled = await login(api, "ann@example.com")
        assert throttled.status_code == 429
        assert "address" in throttled.json()["error"]["message"]


async def test_failures_are_shared_by_every_app_on_the_database(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    """Two admin apps (two replicas) over one database count the same failures."""
    admin_state.sessions = SessionPolicy(max_failures_per_account=2)
    await add_user(engine, "ann@example.com")
    async with client(admin_state) as one, client(admin_state) as two:
        assert (await login(one, "ann@example.com", "wrong password!")).status_code == 401
        assert (await login(two, "ann@example.com", "wrong password!")).status_code == 401
        assert (await login(one, "ann@example.com")).status_code == 429

"""Two-factor sign-in (TOTP, recovery codes) and tenants that require it, over the real admin
app and database."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from llmrelay.store import rotation
from llmrelay.store.crypto import Sealer, key_id_of
from llmrelay.store.db import session_factory
from tests.admin.access_support import (
    PASSWORD,
    add_tenant,
    add_user,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
    totp_code,
)

#: The secret key of the tests' sealer (tests/admin/conftest.py's SEALER).
SEALER_KEY = "resource-tests-secret-key-0123456789abcdefgh"


async def _enable(state: AdminState, email: str) -> tuple[str, list[str]]:
    """Turn two-factor on for `email`; its secret and recovery codes."""
    async with console(state, email) as api:
        setup = await api.post("/auth/totp/setup")
        assert setup.status_code == 200, setup.text
        secret = setup.json()["secret"]
        assert setup.json()["otpauth_uri"].startswith("otpauth://totp/llmrelay:")
        wrong = await api.post("/auth/totp/enable", json={"code": "000000"})
        assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "code"
        enabled = await api.post("/auth/totp/enable", json={"code": totp_code(secret)})
        assert enabled.status_code == 200, enabled.text
        codes = enabled.json()["recovery_codes"]
        assert len(codes) == 10 and len(set(codes)) == 10
        again = await api.post("/auth/totp/setup")
        assert again.status_code == 409  # already on: no silent replacement of the secret
        return secret, codes


async def test_totp_login_needs_a_fresh_code(admin_state: AdminState, engine: AsyncEngine) -> None:
    await add_user(engine, "ann@example.com", platform_admin=True)
    secret, _ = await _enable(admin_state, "ann@example.com")
    async with engine.connect() as conn:
        sealed = (await conn.execute(text("SELECT totp_secret_sealed FROM users"))).scalar_one()
    assert secret not in sealed and sealed.startswith("v1.")

    async with client(admin_state) as api:
        bare = await login(api, "ann@example.com")
        assert bare.status_code == 401
        assert bare.json()["error"]["type"] == "totp_required"
        assert "set-cookie" not in bare.headers
        wrong = await login(api, "ann@example.com", totp_code="123456")
        assert wrong.status_code == 401
        # the code used to enable was consumed: the next step's code signs in
        code = totp_code(secret, 1)
        good = await login(api, "ann@example.com", totp_code=code)
        assert good.status_code == 200, good.text
        replay = await login(api, "ann@example.com", totp_code=code)
        assert replay.status_code == 401  # a code works once
        assert (
            await login(api, "ann@example.com", "wrong password", totp_code=code)
        ).status_code == 401


async def test_recovery_codes_work_once(admin_state: AdminState, engine: AsyncEngine) -> None:
    await add_user(engine, "ann@example.com", platform_admin=True)
    _, codes = await _enable(admin_state, "ann@example.com")
    async with engine.connect() as conn:
        stored = {r[0] for r in await conn.execute(text("SELECT code_digest FROM recovery_codes"))}
    assert not stored & set(codes)  # digests only
    async with client(admin_state) as api:
        first = await login(api, "ann@example.com", recovery_code=codes[0].upper())
        assert first.status_code == 200, first.text
        again = await login(api, "ann@example.com", recovery_code=codes[0])
        assert again.status_code == 401
        assert (await login(api, "ann@example.com", recovery_code=codes[1])).status_code == 200


async def test_disabling_totp_needs_password_and_a_code(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    await add_user(engine, "ann@example.com", platform_admin=True)
    secret, codes = await _enable(admin_state, "ann@example.com")
    async with console(admin_state, "ann@example.com", recovery_code=codes[0]) as api:
        no_code = await api.post("/auth/totp/disable", json={"password": PASSWORD})
        assert no_code.status_code == 401
        wrong_pw = await api.post(
            "/auth/totp/disable", json={"password": "wrong password", "code": totp_code(secret, 1)}
        )
        assert wrong_pw.status_code == 403
        off = await api.post(
            "/auth/totp/disable", json={"password": PASSWORD, "code": totp_code(secret, 1)}
        )
        assert off.status_code == 204, off.text
    async with client(admin_state) as api:
        assert (await login(api, "ann@example.com")).status_code == 200
    async with engine.connect() as conn:
        left = await conn.execute(text("SELECT count(*) FROM recovery_codes"))
        assert left.scalar_one() == 0


async def test_a_tenant_requiring_2fa_refuses_members_without_it(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    strict = await add_tenant(engine, "strict", require_2fa=True)
    relaxed = await add_tenant(engine, "relaxed")
    await add_user(engine, "ann@example.com", {strict: "tenant_admin", relaxed: "viewer"})
    async with console(admin_state, "ann@example.com") as api:
        me = (await api.get("/auth/me")).json()
        assert {m["tenant_id"]: m["two_factor_required"] for m in me["memberships"]} == {
            strict: True,
            relaxed: False,
        }
        refused = await api.get(f"/tenants/{strict}")
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["type"] == "two_factor_required"
        assert "/auth/totp/setup" in error["message"]
        # users:write is held only in the strict tenant: refused before any handler runs
        created = await api.post("/users", json={"email": "x@example.com", "password": PASSWORD})
        assert created.json()["error"]["type"] == "two_factor_required"
        # the other tenant still works, and lists leave the strict tenant out
        assert (await api.get(f"/tenants/{relaxed}")).status_code == 200
        listed = (await api.get("/tenants")).json()["data"]
        assert [t["id"] for t in listed] == [relaxed]
    secret, _ = await _enable(admin_state, "ann@example.com")
    async with console(admin_state, "ann@example.com", totp_code=totp_code(secret, 1)) as api:
        assert (await api.get(f"/tenants/{strict}")).status_code == 200


async def test_totp_secrets_follow_a_secret_key_rotation(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    """`llmrelay rotate-secret` re-seals TOTP secrets too (store/sealed.py lists the column):
    after it, the new key alone opens them and two-factor sign-in still works."""
    await add_user(engine, "ann@example.com", platform_admin=True)
    secret, _ = await _enable(admin_state, "ann@example.com")
    old_sealer = admin_state.secrets()
    new_sealer = Sealer("a brand new secret key for the rotation test 0123", [SEALER_KEY])
    async with session_factory(engine)() as session:
        report = await rotation.rotate(session, new_sealer)
        await session.commit()
    assert {c.column: c.resealed for c in report.columns}["users.totp_secret_sealed"] == 1
    admin_state.sealer = Sealer("a brand new secret key for the rotation test 0123")
    async with engine.connect() as conn:
        sealed = (await conn.execute(text("SELECT totp_secret_sealed FROM users"))).scalar_one()
    assert key_id_of(sealed) == admin_state.sealer.key_id != old_sealer.key_id
    async with client(admin_state) as api:
        answer = await login(api, "ann@example.com", totp_code=totp_code(secret, 1))
        assert answer.status_code == 200, answer.text

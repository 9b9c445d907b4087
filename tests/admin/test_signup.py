"""Self-service sign-up over the real admin app on SQLite and PostgreSQL: one transaction makes
the tenant, its default project, its wallet (with the free credit in the ledger), a pending
tenant admin, a verification token and its mail; a failure at the last step (a trigger that
refuses the mail's job) leaves none of it; the account signs in only once verified; a taken
address is a 409 that tells nothing more; sign-ups are throttled per client address."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.app import create_admin
from llmrelay.admin.signup.service import slug_of
from llmrelay.admin.state import AccountPolicy, AdminState
from tests.admin.access_support import (
    audit_rows,
    client,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
)
from tests.admin.conftest import SEALER
from tests.admin.support import assert_error
from tests.support.mail import mail_text, token_in

PASSWORD = "a long enough password"
ENABLED = AccountPolicy(signup_enabled=True, signup_free_credit_micros=2_500_000)
#: The rows a sign-up makes (the default tenant exists in every database).
MADE = (
    "SELECT (SELECT count(*) FROM tenants WHERE slug <> 'default'),"
    " (SELECT count(*) FROM projects), (SELECT count(*) FROM wallets),"
    " (SELECT count(*) FROM ledger_entries), (SELECT count(*) FROM users),"
    " (SELECT count(*) FROM memberships), (SELECT count(*) FROM account_tokens),"
    " (SELECT count(*) FROM email_outbox), (SELECT count(*) FROM jobs)"
)


def _body(email: str = "Founder@Example.com", tenant: str = "Acme Café") -> dict[str, str]:
    return {"email": email, "password": PASSWORD, "tenant_name": tenant, "name": "Fay"}


async def _made(engine: AsyncEngine) -> tuple[int, ...]:
    async with engine.connect() as conn:
        return tuple((await conn.execute(text(MADE))).one())


@pytest.fixture
def enabled(admin_state: AdminState) -> AdminState:
    admin_state.accounts = ENABLED
    return admin_state


async def test_sign_up_is_off_unless_enabled(admin_state: AdminState, engine: AsyncEngine) -> None:
    async with client(admin_state) as api:
        refused = await api.post("/signup", json=_body())
    assert_error(refused, 403)
    assert refused.json()["error"]["type"] == "signup_disabled"
    assert await _made(engine) == (0,) * 9


async def test_a_sign_up_makes_everything_and_signs_in_once_verified(
    enabled: AdminState, engine: AsyncEngine
) -> None:
    async with client(enabled) as api:
        made = await api.post("/signup", json=_body())
        assert made.status_code == 201, made.text
        body = made.json()
        assert (body["slug"], body["name"], body["email"]) == (
            "acme-cafe",
            "Acme Café",
            "founder@example.com",
        )
        assert (body["pending"], body["prepaid"], body["balance_usd"]) == (True, True, 2.5)
        assert await _made(engine) == (1, 1, 1, 1, 1, 1, 1, 1, 1)
        async with engine.connect() as conn:
            wallet = (
                await conn.execute(
                    text("SELECT prepaid, balance_micros FROM wallets WHERE tenant_id = :t"),
                    {"t": body["id"]},
                )
            ).one()
            assert (bool(wallet[0]), wallet[1]) == (True, 2_500_000)
            credit = (
                await conn.execute(text("SELECT kind, amount_micros FROM ledger_entries"))
            ).one()
            assert tuple(credit) == ("adjustment", 2_500_000)
            project = (await conn.execute(text("SELECT tenant_id, name FROM projects"))).one()
            assert tuple(project) == (body["id"], "default")
            role = (await conn.execute(text("SELECT role FROM memberships"))).scalar()
            assert role == "tenant_admin"

        refused = await login(api, "founder@example.com", PASSWORD)
        assert_error(refused, 403)
        assert refused.json()["error"]["type"] == "account_pending"

        mail = await mail_text(engine, SEALER, "founder@example.com", "verification")
        assert "Acme Café" in mail
        verified = await api.post("/auth/verify-email", json={"token": token_in(mail)})
        assert verified.status_code == 200, verified.text
        signed_in = await login(api, "founder@example.com", PASSWORD)
        assert signed_in.status_code == 200, signed_in.text
        assert [(m["tenant_id"], m["role"]) for m in signed_in.json()["memberships"]] == [
            (body["id"], "tenant_admin")
        ]
    [entry] = [r for r in await audit_rows(engine) if r["action"] == "tenant.signup"]
    assert (entry["actor_kind"], entry["actor_email"]) == ("anonymous", "founder@example.com")
    assert (entry["tenant_id"], entry["target_id"], entry["status_code"]) == (
        body["id"],
        body["id"],
        201,
    )
    assert PASSWORD not in str(entry)


async def test_a_failure_at_the_last_step_leaves_nothing(
    enabled: AdminState, engine: AsyncEngine
) -> None:
    """The mail's job is the transaction's last row: a trigger refusing it rolls back the
    tenant, project, wallet, ledger entry, account, membership, token and mail with it."""
    async with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            await conn.execute(
                text(
                    "CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs "
                    "BEGIN INSERT INTO no_such_table_refused_by_the_test VALUES (1); END"
                )
            )
        else:
            await conn.execute(
                text(
                    "CREATE FUNCTION refuse_jobs() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
                )
            )
            await conn.execute(
                text(
                    "CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs "
                    "FOR EACH ROW EXECUTE FUNCTION refuse_jobs()"
                )
            )
    transport = httpx.ASGITransport(app=create_admin(enabled), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as api:
        failed = await api.post("/signup", json=_body())
    assert failed.status_code == 500
    assert await _made(engine) == (0,) * 9
    async with engine.begin() as conn:  # the throttle's count of the attempt stays
        attempts = await conn.execute(
            text("SELECT count(*) FROM login_failures WHERE email LIKE '~signup:%'")
        )
        assert attempts.scalar() == 1
        on = " ON jobs" if engine.dialect.name == "postgresql" else ""
        await conn.execute(text(f"DROP TRIGGER refuse_jobs{on}"))
    async with client(enabled) as api:  # and the same sign-up then works
        assert (await api.post("/signup", json=_body())).status_code == 201


async def test_a_taken_address_and_a_weak_password(
    enabled: AdminState, engine: AsyncEngine
) -> None:
    async with client(enabled) as api:
        assert (await api.post("/signup", json=_body())).status_code == 201
        taken = await api.post("/signup", json=_body("FOUNDER@example.com", "Other"))
        assert_error(taken, 409, "email")
        assert "exist" not in taken.json()["error"]["message"]
        weak = await api.post("/signup", json=_body("x@example.com") | {"password": "short"})
        assert_error(weak, 400, "password")
        bad = await api.post("/signup", json=_body("not-an-address"))
        assert_error(bad, 400, "email")
    assert await _made(engine) == (1, 1, 1, 1, 1, 1, 1, 1, 1)


async def test_names_make_unique_slugs(enabled: AdminState) -> None:
    async with client(enabled) as api:
        first = await api.post("/signup", json=_body("a@example.com", "Acme Inc."))
        second = await api.post("/signup", json=_body("b@example.com", "ACME inc"))
        default = await api.post("/signup", json=_body("c@example.com", "Default"))
    assert first.json()["slug"] == "acme-inc"
    assert second.json()["slug"].startswith("acme-inc-") and len(second.json()["slug"]) == 15
    assert default.json()["slug"].startswith("default-")
    assert slug_of("   ") == "tenant" and slug_of("Ünïcode — Ltd") == "unicode-ltd"


async def test_sign_ups_are_throttled_per_client_address(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    admin_state.accounts = AccountPolicy(signup_enabled=True, signup_max_per_ip=2)
    async with client(admin_state) as api:
        assert (await api.post("/signup", json=_body("a@example.com", "A"))).status_code == 201
        # a refused sign-up counts too: probing addresses costs the same as signing up
        assert (await api.post("/signup", json=_body("a@example.com", "B"))).status_code == 409
        throttled = await api.post("/signup", json=_body("c@example.com", "C"))
        assert_error(throttled, 429)
        assert int(throttled.headers["Retry-After"]) > 0
    assert (await _made(engine))[0] == 1


async def test_a_postpaid_sign_up_without_credit(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    admin_state.accounts = AccountPolicy(signup_enabled=True, signup_prepaid=False)
    async with client(admin_state) as api:
        made = await api.post("/signup", json=_body())
    assert made.status_code == 201
    assert (made.json()["prepaid"], made.json()["balance_usd"]) == (False, 0)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM ledger_entries"))).scalar() == 0

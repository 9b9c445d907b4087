"""Self-service sign-up through `llmrelay serve` on PostgreSQL: a failure at the transaction's
last row (a trigger refusing the mail's job) leaves no tenant, project, wallet, ledger entry,
account, token or mail; the same sign-up then succeeds, its verification mail reaches a real
SMTP server, and the account signs in only once the address is verified."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mail import token_in
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]
PASSWORD = "a long enough password"
SIGNUP = {"email": "pat@example.com", "password": PASSWORD, "tenant_name": "Pat Co"}
COUNTS = (
    "SELECT (SELECT count(*) FROM tenants WHERE slug <> 'default'),"
    " (SELECT count(*) FROM projects), (SELECT count(*) FROM wallets),"
    " (SELECT count(*) FROM ledger_entries), (SELECT count(*) FROM users WHERE NOT platform_admin),"
    " (SELECT count(*) FROM memberships), (SELECT count(*) FROM account_tokens),"
    " (SELECT count(*) FROM email_outbox)"
)


async def _sql(url: str, *statements: str) -> tuple[object, ...]:
    """Run the statements; the first row of the last one."""
    conn = await asyncpg.connect(url)
    try:
        for statement in statements[:-1]:
            await conn.execute(statement)
        row = await conn.fetchrow(statements[-1])
        return tuple(row) if row is not None else ()
    finally:
        await conn.close()


def test_sign_up_on_postgres(pg_url: str, tmp_path: Path) -> None:
    sink = SmtpSink().start()
    env = {
        "LLMRELAY_SMTP_URL": sink.url(),
        "LLMRELAY_PUBLIC_URL": "https://console.example",
        "LLMRELAY_SIGNUP_ENABLED": "true",
        "LLMRELAY_SIGNUP_FREE_CREDIT_USD": "0.5",
        "LLMRELAY_JOBS_POLL_S": "0.2",
    }
    process = GatewayProcess(tmp_path, database_url=pg_url, env=env)
    migrated = subprocess.run(
        [sys.executable, "-m", "llmrelay", "migrate"],
        env=process.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    asyncio.run(
        _sql(
            pg_url,
            "CREATE FUNCTION refuse_jobs() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
            "CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs "
            "FOR EACH ROW EXECUTE FUNCTION refuse_jobs()",
            "SELECT 1",
        )
    )
    process.start()
    try:
        with httpx.Client(base_url=f"{process.url}/api/admin") as api:
            failed = api.post("/signup", json=SIGNUP)
            assert failed.status_code == 500, failed.text
            assert asyncio.run(_sql(pg_url, COUNTS)) == (0,) * 8

            asyncio.run(_sql(pg_url, "DROP TRIGGER refuse_jobs ON jobs", "SELECT 1"))
            made = api.post("/signup", json=SIGNUP)
            assert made.status_code == 201, made.text
            assert asyncio.run(_sql(pg_url, COUNTS)) == (1, 1, 1, 1, 1, 1, 1, 1)
            wallet = asyncio.run(_sql(pg_url, "SELECT prepaid, balance_micros FROM wallets"))
            assert wallet == (True, 500_000)

            sign_in = {"email": "pat@example.com", "password": PASSWORD}
            refused = api.post("/auth/login", json=sign_in)
            assert refused.status_code == 403, refused.text
            [mail] = sink.wait_for("pat@example.com")
            assert "Pat Co" in mail.text()
            verified = api.post("/auth/verify-email", json={"token": token_in(mail.text())})
            assert verified.status_code == 200, verified.text
            signed_in = api.post("/auth/login", json=sign_in)
            assert signed_in.status_code == 200, signed_in.text
            assert [m["role"] for m in signed_in.json()["memberships"]] == ["tenant_admin"]
    finally:
        sink.stop()
        assert process.stop() == 0, process.logs()
    sent = asyncio.run(_sql(pg_url, "SELECT status, attempts FROM email_outbox"))
    assert sent == ("sent", 1)

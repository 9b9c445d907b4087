"""Self-service sign-up through `llmrelay serve` on PostgreSQL: a failure at the transaction's
last row (a trigger refusing the mail's job) leaves no tenant, project, wallet, ledger entry,
account, token or mail; the same sign-up then succeeds, its verification mail reaches a real
SMTP server, and the account signs in only once the address is verified."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import asyncpg
import httpx
import orjson
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mail import token_in
from tests.support.smtp_sink import SmtpSink
from tests.support.zygote import run_llmrelay

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


def _exchange(sock: socket.socket, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one request on a kept-alive connection and read its answer: status, headers, and
    the body when it has a Content-Length (else what came with the head)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-answer"
        body += chunk
    return int(status_line.split()[1]), headers, body


def _refused_sign_up_keeps_the_connection(port: int) -> None:
    """The refused sign-up is a 500 in the admin error shape, and the kept-alive connection it
    came on still serves the next request. (Starlette re-raises after its 500 and uvicorn then
    closed the connection unannounced: a client reusing it got a TCP reset.)"""
    payload = orjson.dumps(SIGNUP)
    signup = (
        b"POST /api/admin/signup HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
    )
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        status, headers, body = _exchange(sock, signup)
        assert status == 500, body
        assert orjson.loads(body)["error"]["type"] == "server_error"
        assert headers.get("connection") != "close"
        status, _, body = _exchange(sock, b"GET /livez HTTP/1.1\r\nhost: gateway\r\n\r\n")
        assert status == 200, body


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
    migrated = run_llmrelay(
        ["migrate"],
        env=process.env,
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
        with httpx.Client(base_url=f"{process.url}/api/admin", timeout=60) as api:
            _refused_sign_up_keeps_the_connection(process.port)
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

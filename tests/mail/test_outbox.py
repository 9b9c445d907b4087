"""The outbox on SQLite and PostgreSQL: a mail and its send job are written in the caller's
transaction (a rolled-back change leaves neither), the body is sealed (the link it carries is
nowhere in the database in the clear), and a dedupe key makes a mail happen once."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.mail import outbox
from llmrelay.mail.smtp import SmtpConfig, build_message
from llmrelay.store.crypto import Sealer
from tests.support.mail import mail_settings
from tests.support.mail import outbox as stored

SEALER = Sealer("outbox-tests-secret-key-0123456789abcdefgh")
LINK = "https://console.example/reset-password?token=plain-link-token-4c1d9e7f"


async def _jobs(engine: AsyncEngine) -> list[dict[str, object]]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT * FROM jobs"))
        return [dict(row._mapping) for row in rows]


async def test_the_body_is_sealed_and_the_job_comes_with_it(
    engine: AsyncEngine, database_url: str
) -> None:
    async with engine.begin() as conn:
        message_id = await outbox.queue_mail(
            conn,
            outbox.PASSWORD_RESET,
            "ann@example.com",
            "Reset your password",
            f"Choose a new one: {LINK}",
            f'<a href="{LINK}">reset</a>',
            sealer=SEALER,
        )
    assert message_id is not None
    [row] = await stored(engine)
    assert (row["id"], row["status"], row["attempts"]) == (message_id, "pending", 0)
    assert row["subject"] == "Reset your password"
    body = outbox.open_body(SEALER, message_id, row["body_sealed"])
    assert LINK in body.text and body.html is not None and LINK in body.html
    [job] = await _jobs(engine)
    assert job["kind"] == "send_mail" and job["status"] == "queued"
    assert job["dedupe_key"] == f"send_mail:{message_id}"

    everything = repr(await stored(engine)) + repr(await _jobs(engine))
    assert "plain-link-token" not in everything
    if database_url.startswith("sqlite"):  # and not in the file's bytes either (WAL included)
        path = Path(database_url.removeprefix("sqlite:///"))
        for file in (path, path.with_name(path.name + "-wal")):
            if file.exists():
                assert b"plain-link-token" not in file.read_bytes()


async def test_a_rolled_back_change_queues_nothing(engine: AsyncEngine) -> None:
    class Refused(Exception):
        pass

    try:
        async with engine.begin() as conn:
            await outbox.queue_mail(
                conn, outbox.INVITATION, "bob@example.com", "Hi", "text", sealer=SEALER
            )
            raise Refused  # the change the mail was about fails after the mail was queued
    except Refused:
        pass
    assert await stored(engine) == []
    assert await _jobs(engine) == []


async def test_a_dedupe_key_makes_one_mail(engine: AsyncEngine) -> None:
    made = []
    for _ in range(2):
        async with engine.begin() as conn:
            made.append(
                await outbox.queue_mail(
                    conn,
                    outbox.LOW_BALANCE,
                    "ann@example.com",
                    "Low balance",
                    "text",
                    sealer=SEALER,
                    tenant_id="t1",
                    dedupe_key="low_balance:t1:1:u1",
                )
            )
    assert made[0] is not None and made[1] is None
    assert len(await stored(engine)) == 1
    assert len(await _jobs(engine)) == 1


async def test_a_subject_cannot_carry_a_header() -> None:
    """A newline in a subject (a tenant's name in an alert) never starts a second header."""
    config = SmtpConfig.from_settings(mail_settings("smtp://127.0.0.1:2525"))
    assert config is not None
    message = build_message(
        config, "m1", "ann@example.com", "Hi\r\nBcc: eve@example.com", "text", None
    )
    assert "Bcc" not in message
    assert message["Message-ID"] == "<m1@gateway.example>"

"""The send and sweep jobs, run by a real job runner, against a real SMTP server on loopback:
STARTTLS (or TLS from the first byte) with the server's certificate verified and a sign-in;
refusals for now retried until the server accepts, refusals for good failed at once; no SMTP
server: the mail stays pending until one is configured, then the sweep sends it; a mail
pending too long is failed, not sent. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import queue
from llmrelay.mail import outbox
from llmrelay.mail.jobs import MAIL_SWEEP
from llmrelay.settings import Settings
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import create_engine
from llmrelay.store.types import utcnow
from tests.support.mail import mail_settings, runner
from tests.support.mail import outbox as stored
from tests.support.migrated import migrated_sqlite_url
from tests.support.smtp_sink import SmtpSink
from tests.support.tls import Certificates, make_certificates

SEALER = Sealer("mail-job-tests-secret-key-0123456789abcdef")
USER, PASSWORD = "relay", "smtp password 5e1f"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("smtp-tls"))


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """For what does not depend on the database (the SMTP side alone)."""
    engine = create_engine(await migrated_sqlite_url(tmp_path))
    yield engine
    await engine.dispose()


@pytest.fixture
def sink(certificates: Certificates) -> Iterator[SmtpSink]:
    server = SmtpSink(certificates=certificates, credentials=(USER, PASSWORD)).start()
    yield server
    server.stop()


def _settings(sink: SmtpSink, ca_file: Path, **overrides: object) -> Settings:
    return mail_settings(sink.url(), smtp_ca_file=ca_file, **overrides)


async def _queue(engine: AsyncEngine, to: str, text_body: str = "Hello there") -> str:
    async with engine.begin() as conn:
        message_id = await outbox.queue_mail(
            conn,
            outbox.INVITATION,
            to,
            "An invitation",
            text_body,
            "<p>Hello there</p>",
            sealer=SEALER,
        )
    assert message_id is not None
    return message_id


async def _row(engine: AsyncEngine, message_id: str) -> dict[str, object]:
    return next(r for r in await stored(engine) if r["id"] == message_id)


async def test_a_mail_is_sent_over_starttls_with_a_sign_in(
    engine: AsyncEngine, sink: SmtpSink, certificates: Certificates
) -> None:
    message_id = await _queue(engine, "ann@example.com")
    await runner(engine, SEALER, _settings(sink, certificates.ca_file)).run_until_idle()
    [received] = sink.wait_for("ann@example.com")
    assert received.encrypted and received.login == USER
    assert received.sender == "noreply@gateway.example"
    assert received.subject == "An invitation"
    assert received.text().strip() == "Hello there"
    assert received.html() is not None and "<p>Hello there</p>" in str(received.html())
    assert received.message["Message-ID"] == f"<{message_id}@gateway.example>"
    row = await _row(engine, message_id)
    assert (row["status"], row["attempts"], row["last_error"]) == ("sent", 1, None)
    assert row["sent_at"] is not None


async def test_refusals_for_now_are_retried_until_the_server_accepts(
    engine: AsyncEngine, sink: SmtpSink, certificates: Certificates
) -> None:
    sink.refuse_next(2)
    message_id = await _queue(engine, "bob@example.com")
    await runner(engine, SEALER, _settings(sink, certificates.ca_file)).run_until_idle()
    assert len(sink.wait_for("bob@example.com")) == 1
    row = await _row(engine, message_id)
    assert (row["status"], row["attempts"]) == ("sent", 3)


async def test_a_refusal_for_good_fails_at_once(
    engine: AsyncEngine, sink: SmtpSink, certificates: Certificates
) -> None:
    sink.unknown.add("gone@example.com")
    message_id = await _queue(engine, "gone@example.com")
    await runner(engine, SEALER, _settings(sink, certificates.ca_file)).run_until_idle()
    row = await _row(engine, message_id)
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert "550" in str(row["last_error"])
    assert sink.received == []


async def test_starttls_required_of_a_server_without_it_fails_after_every_attempt(
    sqlite_engine: AsyncEngine, certificates: Certificates
) -> None:
    plain = SmtpSink().start()  # no certificate: offers no STARTTLS
    try:
        message_id = await _queue(sqlite_engine, "cat@example.com")
        settings = mail_settings(plain.url(), smtp_starttls="required")
        await runner(sqlite_engine, SEALER, settings).run_until_idle()
    finally:
        plain.stop()
    row = await _row(sqlite_engine, message_id)
    assert (row["status"], row["attempts"]) == ("failed", outbox.MAX_ATTEMPTS)
    assert "STARTTLS" in str(row["last_error"])
    assert plain.received == []


async def test_smtps_speaks_tls_from_the_first_byte(
    sqlite_engine: AsyncEngine, certificates: Certificates
) -> None:
    server = SmtpSink(certificates=certificates, implicit_tls=True).start()
    try:
        await _queue(sqlite_engine, "dan@example.com")
        settings = mail_settings(server.url(), smtp_ca_file=certificates.ca_file)
        await runner(sqlite_engine, SEALER, settings).run_until_idle()
        [received] = server.wait_for("dan@example.com")
        assert received.encrypted
    finally:
        server.stop()


async def test_an_unknown_certificate_is_refused(
    sqlite_engine: AsyncEngine, sink: SmtpSink
) -> None:
    """Without the test CA the server's certificate does not verify: nothing is sent (and so
    the password is never sent either)."""
    message_id = await _queue(sqlite_engine, "eve@example.com")
    settings = mail_settings(sink.url(), mail_retry_base_s=3600.0)
    await runner(sqlite_engine, SEALER, settings).run_until_idle()
    row = await _row(sqlite_engine, message_id)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert "CERTIFICATE_VERIFY_FAILED" in str(row["last_error"])
    assert sink.received == []


async def test_without_smtp_mails_wait_then_the_sweep_sends_them(
    engine: AsyncEngine, sink: SmtpSink, certificates: Certificates
) -> None:
    waiting = await _queue(engine, "fay@example.com")
    stale = await _queue(engine, "gus@example.com")
    await runner(engine, SEALER, mail_settings(None)).run_until_idle()
    assert {r["status"] for r in await stored(engine)} == {"pending"}
    assert all(r["attempts"] == 0 for r in await stored(engine))
    async with engine.connect() as conn:  # the send jobs say what happened: nothing was sent
        sends = (
            await conn.execute(text("SELECT status, error FROM jobs WHERE kind = 'send_mail'"))
        ).all()
    assert sends and all(s.status == "failed" and "no SMTP server" in s.error for s in sends)

    # later: an SMTP server is configured; one mail is past the age limit
    async with engine.begin() as conn:
        table = outbox.outbox
        await conn.execute(update(table).values(created_at=utcnow() - timedelta(minutes=5)))
        await conn.execute(
            update(table).where(table.c.id == stale).values(created_at=utcnow() - timedelta(days=3))
        )
        await queue.enqueue(conn, MAIL_SWEEP, {}, now=utcnow().timestamp())
    await runner(engine, SEALER, _settings(sink, certificates.ca_file)).run_until_idle()
    sink.wait_for("fay@example.com")
    assert (await _row(engine, waiting))["status"] == "sent"
    expired = await _row(engine, stale)
    assert expired["status"] == "failed" and "MAIL_MAX_AGE" in str(expired["last_error"])
    assert sink.messages_to("gus@example.com") == []
    async with engine.connect() as conn:
        sweeps = await conn.execute(text("SELECT result FROM jobs WHERE kind = 'mail_sweep'"))
        assert len(sweeps.all()) == 1


async def test_a_body_sealed_under_another_key_fails_the_mail(
    sqlite_engine: AsyncEngine, sink: SmtpSink, certificates: Certificates
) -> None:
    message_id = await _queue(sqlite_engine, "hal@example.com")
    other = Sealer("another-secret-key-nobody-here-has-0123456789")
    settings = _settings(sink, certificates.ca_file)
    await runner(sqlite_engine, other, settings).run_until_idle()
    row = await _row(sqlite_engine, message_id)
    assert row["status"] == "failed" and "key" in str(row["last_error"])
    assert sink.received == []

"""The mail jobs: `send_mail` delivers one outbox mail (retried with backoff while the server
refuses it for now, failed at once when it refuses it for good), and `mail_sweep`, every five
minutes, queues a send for every mail still pending without a live job (SMTP was configured
after it was queued; its job was lost) and fails mails pending past LLMRELAY_MAIL_MAX_AGE_S.

With no SMTP server configured a send leaves its mail pending and logs a warning; in
development LLMRELAY_MAIL_LOG=true also logs the mail's text (its links included).

A mail can go out twice, never zero times, when a worker dies between the server's
acceptance and the outbox update: its Message-ID is the same both times.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy import func, select, update

from llmrelay.jobs import queue
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind, RetryLater, exponential_backoff
from llmrelay.jobs.runner import Schedule
from llmrelay.mail import outbox
from llmrelay.mail.outbox import FAILED, PENDING, SEND_MAIL, SENT
from llmrelay.mail.smtp import SendFailed, SmtpConfig, build_message, send
from llmrelay.settings import Environment, Settings
from llmrelay.store.crypto import CredentialError

log = structlog.get_logger(__name__)

MAIL_SWEEP = "mail_sweep"
SWEEP_INTERVAL_S = 300.0
#: A pending mail younger than this still has the job queued with it: the sweep leaves it.
_FRESH_S = 60.0
_SWEEP_BATCH = 500
#: Retries wait LLMRELAY_MAIL_RETRY_BASE_S, doubling, at most this long.
_RETRY_CAP_S = 3600.0


def _settings(context: JobContext) -> Settings:
    settings: Settings = context.services.settings
    return settings


def _too_old(created_at: datetime, settings: Settings) -> bool:
    return (datetime.now(UTC) - created_at).total_seconds() > settings.mail_max_age_s


async def send_mail(context: JobContext) -> dict[str, Any] | None:
    settings = _settings(context)
    engine = context.engine
    message_id = str(context.payload.get("message_id", ""))
    async with engine.connect() as conn:
        mail = await outbox.pending(conn, message_id)
    if mail is None:
        return {"skipped": "the mail is not pending (sent, failed or gone)"}
    if _too_old(mail.created_at, settings):
        async with engine.begin() as conn:
            await outbox.mark(conn, mail.id, FAILED, attempted=False, error=_expired(settings))
        return {"status": FAILED, "reason": "expired"}
    config = SmtpConfig.from_settings(settings)
    if config is None:
        log.warning(
            "mail_not_sent",
            reason="no SMTP server configured (LLMRELAY_SMTP_URL): the mail stays pending",
            message_id=mail.id,
            kind=mail.kind,
        )
        if settings.mail_log and settings.env is Environment.DEVELOPMENT:
            body = outbox.open_body(_sealer(context), mail.id, mail.body_sealed)
            log.warning("mail_logged", to=mail.to, subject=mail.subject, text=body.text)
        # Not a success: nothing was sent. The job fails saying why; the mail stays pending
        # in the outbox, and the sweep queues a new send once a server is configured.
        raise GiveUp(
            "not sent: no SMTP server is configured (LLMRELAY_SMTP_URL); the mail waits in "
            "the outbox and goes out once one is",
            {"status": PENDING, "reason": "no SMTP server configured"},
        )
    try:
        body = outbox.open_body(_sealer(context), mail.id, mail.body_sealed)
    except CredentialError as exc:  # sealed under a key this process does not have
        async with engine.begin() as conn:
            await outbox.mark(conn, mail.id, FAILED, attempted=False, error=str(exc))
        raise GiveUp(f"the mail's body cannot be opened: {exc}") from None
    message = build_message(config, mail.id, mail.to, mail.subject, body.text, body.html)
    try:
        await send(config, message)
    except SendFailed as failed:
        final = failed.permanent or context.is_last_attempt
        async with engine.begin() as conn:
            await outbox.mark(
                conn, mail.id, FAILED if final else PENDING, attempted=True, error=str(failed)
            )
        log.warning(
            "mail_send_failed", message_id=mail.id, kind=mail.kind, error=str(failed), final=final
        )
        if final:
            raise GiveUp(str(failed)) from None
        delay = exponential_backoff(settings.mail_retry_base_s, _RETRY_CAP_S)
        raise RetryLater(str(failed), delay_s=delay(context.job.attempts)) from None
    async with engine.begin() as conn:
        await outbox.mark(conn, mail.id, SENT, attempted=True)
    log.info("mail_sent", message_id=mail.id, kind=mail.kind)
    return {"status": SENT}


def _sealer(context: JobContext) -> Any:
    if context.sealer is None:
        raise GiveUp("this worker has no secret key to open the mail's body")
    return context.sealer


def _expired(settings: Settings) -> str:
    return f"not sent within LLMRELAY_MAIL_MAX_AGE_S ({settings.mail_max_age_s:g} s)"


async def sweep(context: JobContext) -> dict[str, Any] | None:
    settings = _settings(context)
    engine = context.engine
    now = time.time()
    table = outbox.outbox
    is_pending = table.c.status == PENDING
    async with engine.begin() as conn:
        expired = await conn.execute(
            update(table)
            .where(is_pending, table.c.created_at < queue.utc(now - settings.mail_max_age_s))
            .values(status=FAILED, last_error=_expired(settings))
        )
    if SmtpConfig.from_settings(settings) is None:
        async with engine.connect() as conn:
            waiting = (await conn.execute(select(func.count()).where(is_pending))).scalar()
        if waiting:
            log.warning(
                "mail_pending_without_smtp",
                pending=waiting,
                note="set LLMRELAY_SMTP_URL: they are sent once it is",
            )
        return {"expired": expired.rowcount or 0, "queued": 0}
    queued = 0
    async with engine.begin() as conn:
        rows = await conn.execute(
            select(table.c.id, table.c.tenant_id)
            .where(is_pending, table.c.created_at < queue.utc(now - _FRESH_S))
            .order_by(table.c.created_at)
            .limit(_SWEEP_BATCH)
        )
        for message_id, tenant_id in rows.all():
            made = await queue.enqueue(
                conn,
                SEND_MAIL,
                {"message_id": message_id},
                now=now,
                dedupe_key=outbox.send_job_key(message_id),
                max_attempts=outbox.MAX_ATTEMPTS,
                tenant_id=tenant_id,
            )
            queued += made is not None
    if queued:
        log.info("mail_sweep_queued", queued=queued)
    return {"expired": expired.rowcount or 0, "queued": queued}


def kinds() -> list[JobKind]:
    return [
        JobKind(SEND_MAIL, send_mail, max_attempts=outbox.MAX_ATTEMPTS, timeout_s=120.0),
        JobKind(
            MAIL_SWEEP,
            sweep,
            max_attempts=1,
            release_dedupe=False,
            keep_finished_s=86_400.0,
            timeout_s=120.0,
        ),
    ]


def schedules(settings: Settings) -> list[Schedule]:
    return [Schedule(MAIL_SWEEP, SWEEP_INTERVAL_S)]

"""The outbox: a mail is a row of `email_outbox` (its body sealed, context = the message id)
plus a `send_mail` job, both written in the caller's transaction. A mail for a change that
rolls back is never sent, and one for a change that commits is never lost: the job sends it
(jobs/ retries it), and the sweep (mail/jobs.py) queues another job for any mail still
pending without one.

States: `pending` (queued, or waiting for an SMTP server), `sent`, `failed` (refused for
good, or out of attempts, or never sent within LLMRELAY_MAIL_MAX_AGE_S).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from llmrelay.jobs import queue
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import new_id
from llmrelay.store.models_billing import EmailMessage
from llmrelay.store.types import utcnow

outbox: Table = EmailMessage.__table__  # type: ignore[assignment]

PENDING = "pending"
SENT = "sent"
FAILED = "failed"

#: The job kind that sends one mail (mail/jobs.py).
SEND_MAIL = "send_mail"
#: Attempts of one mail's job before the mail is marked failed.
MAX_ATTEMPTS = 8

#: What `kind` says a mail is (the column; free text, these are the ones this version sends).
INVITATION = "invitation"
MEMBERSHIP = "membership"
VERIFICATION = "verification"
PASSWORD_RESET = "password_reset"
LOW_BALANCE = "low_balance"
BUDGET_ALERT = "budget_alert"


@dataclass(frozen=True, slots=True)
class Body:
    text: str
    html: str | None


def send_job_key(message_id: str) -> str:
    """The send job's dedupe key: one live job per mail."""
    return f"{SEND_MAIL}:{message_id}"


def _insert(conn: AsyncConnection | AsyncSession) -> Any:
    bind = conn.bind if isinstance(conn, AsyncSession) else conn
    assert bind is not None
    return (postgresql.insert if bind.dialect.name == "postgresql" else sqlite.insert)(outbox)


async def queue_mail(
    conn: AsyncConnection | AsyncSession,
    kind: str,
    to: str,
    subject: str,
    text: str,
    html: str | None = None,
    *,
    sealer: Sealer,
    tenant_id: str | None = None,
    dedupe_key: str | None = None,
) -> str | None:
    """Queue a mail and its send job in the caller's transaction; the message id, or None
    when `dedupe_key` was used by an earlier mail (that one stands for this one: nothing is
    written). The caller commits (or rolls back: then neither exists)."""
    message_id = new_id()
    body = orjson.dumps({"text": text, "html": html})
    statement = _insert(conn).values(
        id=message_id,
        tenant_id=tenant_id,
        kind=kind,
        to_address=to,
        subject=" ".join(subject.split())[:300],
        body_sealed=sealer.seal(body, context=message_id),
        dedupe_key=dedupe_key,
        status=PENDING,
        attempts=0,
        created_at=utcnow(),
    )
    if dedupe_key is not None:
        statement = statement.on_conflict_do_nothing(index_elements=["dedupe_key"])
    if (await conn.execute(statement.returning(outbox.c.id))).first() is None:
        return None
    await queue.enqueue(
        conn,
        SEND_MAIL,
        {"message_id": message_id},
        now=time.time(),
        dedupe_key=send_job_key(message_id),
        max_attempts=MAX_ATTEMPTS,
        tenant_id=tenant_id,
    )
    return message_id


def open_body(sealer: Sealer, message_id: str, sealed: str) -> Body:
    stored = orjson.loads(sealer.open(sealed, context=message_id))
    return Body(text=str(stored["text"]), html=stored.get("html"))


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A pending mail, as the send job reads it."""

    id: str
    kind: str
    to: str
    subject: str
    body_sealed: str
    attempts: int
    created_at: datetime


async def pending(conn: AsyncConnection, message_id: str) -> Outgoing | None:
    row = (
        await conn.execute(
            select(
                outbox.c.id,
                outbox.c.kind,
                outbox.c.to_address,
                outbox.c.subject,
                outbox.c.body_sealed,
                outbox.c.attempts,
                outbox.c.created_at,
            ).where(outbox.c.id == message_id, outbox.c.status == PENDING)
        )
    ).first()
    return None if row is None else Outgoing(*row)


async def mark(
    conn: AsyncConnection,
    message_id: str,
    status: str,
    *,
    attempted: bool,
    error: str | None = None,
) -> None:
    """Record an attempt's outcome: `sent`, `failed`, or still `pending` (with the error)."""
    values: dict[str, Any] = {
        "status": status,
        "last_error": None if error is None else error[:2000],
    }
    if attempted:
        values["attempts"] = outbox.c.attempts + 1
    if status == SENT:
        values["sent_at"] = utcnow()
    await conn.execute(
        update(outbox).where(outbox.c.id == message_id, outbox.c.status == PENDING).values(**values)
    )

"""What GET /mail/outbox answers."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class OutboxMailOut(BaseModel):
    id: str
    tenant_id: str | None
    #: invitation, membership, verification, password_reset, low_balance, budget_alert
    kind: str
    to: str
    subject: str
    #: pending (queued, retrying, or waiting for an SMTP server), sent, failed
    status: str
    attempts: int
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None


class OutboxPage(BaseModel):
    data: list[OutboxMailOut]
    next_cursor: str | None
    #: Whether an SMTP server is configured (without one, mails wait as pending).
    smtp_configured: bool

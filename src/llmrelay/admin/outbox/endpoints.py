"""GET /api/admin/mail/outbox: the mails the gateway queued, newest first (`users:read`; a
platform admin sees every tenant's and the platform's own)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request

from llmrelay.admin.access import Actor, require
from llmrelay.admin.errors import AdminError
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.outbox import repository
from llmrelay.admin.outbox.schemas import OutboxMailOut, OutboxPage

router = APIRouter(tags=["accounts"])
Reader = Annotated[Actor, Depends(require("users:read"))]


def _cursor(value: str | None) -> tuple[datetime, str] | None:
    if not value:
        return None
    at, _, mail_id = value.partition("~")
    try:
        return datetime.fromisoformat(at), mail_id
    except ValueError:
        raise AdminError(400, "cursor: not a cursor this API gave", field="cursor") from None


@router.get("/mail/outbox")
async def outbox(
    request: Request,
    session: Session,
    actor: Reader,
    status: Literal["pending", "sent", "failed"] | None = None,
    kind: Annotated[str | None, Query(max_length=32)] = None,
    to: Annotated[str | None, Query(max_length=320)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=100)] = None,
) -> OutboxPage:
    """Subject, recipient, kind, state and attempts of each mail (bodies stay sealed)."""
    tenants = None if actor.platform_admin else actor.tenants_for("users:read") or frozenset()
    rows = await repository.page(
        session,
        tenants=tenants,
        status=status,
        kind=kind,
        to=to.strip().lower() if to else None,
        after=_cursor(cursor),
        limit=limit + 1,
    )
    more = len(rows) > limit
    shown = rows[:limit]
    last = shown[-1] if more and shown else None
    return OutboxPage(
        data=[
            OutboxMailOut(
                id=m.id,
                tenant_id=m.tenant_id,
                kind=m.kind,
                to=m.to_address,
                subject=m.subject,
                status=m.status,
                attempts=m.attempts,
                last_error=m.last_error,
                created_at=m.created_at,
                sent_at=m.sent_at,
            )
            for m in shown
        ],
        next_cursor=f"{last.created_at.isoformat()}~{last.id}" if last is not None else None,
        smtp_configured=state(request).accounts.mail_configured,
    )

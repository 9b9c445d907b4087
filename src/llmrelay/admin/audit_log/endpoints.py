"""GET /api/admin/audit: HTTP only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from llmrelay.admin.access import Actor, require
from llmrelay.admin.audit_log import repository
from llmrelay.admin.audit_log.schemas import AuditPage, audit_out
from llmrelay.admin.kit.http import Cursor, Limit, Session
from llmrelay.admin.kit.params import When
from llmrelay.admin.kit.problems import Invalid
from llmrelay.admin.usage_query import utc

router = APIRouter(tags=["audit"])
Reader = Annotated[Actor, Depends(require("audit:read"))]
Text = Annotated[str | None, Query(min_length=1, max_length=320)]


@router.get("/audit")
async def list_audit(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    actor_filter: Annotated[Text, Query(alias="actor", description="user id or email")] = None,
    action: Annotated[Text, Query(description='exact, or a prefix ending in "*"')] = None,
    target: Annotated[Text, Query(description="target id")] = None,
    since: When = None,
    until: When = None,
) -> AuditPage:
    """Audit entries of the caller's tenants (all, and those of no tenant such as sign-ins,
    for a platform admin), newest first."""
    since, until = utc(since), utc(until)
    if since is not None and until is not None and since >= until:
        raise Invalid("until: must be later than since", "until")
    where = repository.AuditFilter(
        tenants=actor.tenants_for("audit:read"),
        actor=actor_filter.strip().lower()
        if actor_filter and "@" in actor_filter
        else actor_filter,
        action=action,
        target=target,
        since=since,
        until=until,
    )
    rows, next_cursor = await repository.page(session, where, limit, cursor)
    return AuditPage(data=[audit_out(r) for r in rows], next_cursor=next_cursor)

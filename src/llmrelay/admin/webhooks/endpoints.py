"""/api/admin/projects/{id}/webhook-secret and /api/admin/webhooks/deliveries: HTTP only; the
rules are in service.py. The secret is shown to whoever may change the project (it signs what
the project's receivers trust); its rotation is audited without it."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit.http import Cursor, Limit, Session, state
from llmrelay.admin.projects.endpoints import load as load_project
from llmrelay.admin.webhooks import repository, service
from llmrelay.admin.webhooks.schemas import (
    DeliveryPage,
    WebhookSecretOut,
    delivery_out,
)

router = APIRouter(tags=["webhooks"])
Reader = Annotated[Actor, Depends(require("projects:read"))]
Writer = Annotated[Actor, Depends(require("projects:write"))]


@router.get("/projects/{project_id}/webhook-secret")
async def get_webhook_secret(
    request: Request, session: Session, actor: Writer, project_id: str
) -> WebhookSecretOut:
    """The secret that signs the project's webhook events (made now if it has none)."""
    project = await load_project(session, actor, "projects:write", project_id)
    secret = await service.secret(session, state(request).sealer, project.id)
    await session.commit()
    return WebhookSecretOut(project_id=project.id, secret=secret)


@router.post("/projects/{project_id}/webhook-secret/rotate")
async def rotate_webhook_secret(
    request: Request, session: Session, actor: Writer, project_id: str
) -> WebhookSecretOut:
    """A new secret, in force at once: events sent from now on (retries of earlier ones
    included) are signed with it, so update the receivers first or accept a short gap."""
    project = await load_project(session, actor, "projects:write", project_id)
    sealer = state(request).sealer
    before = await service.secret(session, sealer, project.id)
    after = await service.rotate(session, sealer, project.id)
    audit.note(
        request,
        "project.webhook_secret_rotate",
        "project",
        project.id,
        {"webhook_secret": _fingerprint(before)},
        {"webhook_secret": _fingerprint(after)},
        project.tenant_id,
    )
    await session.commit()
    return WebhookSecretOut(project_id=project.id, secret=after)


@router.get("/webhooks/deliveries")
async def list_deliveries(
    session: Session,
    actor: Reader,
    project: Annotated[str, Query(min_length=1, max_length=64, description="a project id")],
    status: Literal["pending", "delivered", "failed"] | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> DeliveryPage:
    """A project's webhook deliveries, newest first, with every attempt."""
    row = await load_project(session, actor, "projects:read", project)
    rows, next_cursor = await repository.page(session, row.id, status, limit, cursor)
    return DeliveryPage(data=[delivery_out(r) for r in rows], next_cursor=next_cursor)


def _fingerprint(secret: str) -> str:
    """What the audit entry is given instead of the secret (and masks anyway)."""
    return hashlib.sha256(secret.encode()).hexdigest()[:16]

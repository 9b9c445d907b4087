"""/api/admin/projects/{id}/limits and /api/admin/keys/{id}/limits: HTTP only. A PUT replaces
the limits and budget whole and needs the project's or key's If-Match (its ETag)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from llmrelay.admin.access import Actor, require
from llmrelay.admin.keys import service as keys_service
from llmrelay.admin.keys.endpoints import load as load_key
from llmrelay.admin.kit import handlers
from llmrelay.admin.kit.http import Session, etag
from llmrelay.admin.limits.schemas import LimitsOut, limit_changes
from llmrelay.admin.projects import repository as projects_repository
from llmrelay.admin.projects import service as projects_service
from llmrelay.admin.projects.endpoints import load as load_project
from llmrelay.admin.projects.schemas import limits_out
from llmrelay.store.models import ApiKey, Project

router = APIRouter(tags=["limits"])
Reader = Annotated[Actor, Depends(require("limits:read"))]
Writer = Annotated[Actor, Depends(require("limits:write"))]
Limits = Annotated[
    dict[str, Any],
    Body(description='{"limits": {"rpm", "tpm", "concurrency"}, "monthly_budget_usd"}'),
]


def _out(row: Project | ApiKey) -> LimitsOut:
    return LimitsOut.model_validate(limits_out(row))


@router.get("/projects/{project_id}/limits")
async def get_project_limits(
    response: Response, session: Session, actor: Reader, project_id: str
) -> LimitsOut:
    row = await load_project(session, actor, "limits:read", project_id)
    etag(response, row.version)
    return _out(row)


@router.put("/projects/{project_id}/limits")
async def set_project_limits(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    project_id: str,
    body: Limits,
) -> LimitsOut:
    row = await load_project(session, actor, "limits:write", project_id)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "project.limits",
        row.tenant_id,
        show=lambda: _out(row),
        apply=lambda: projects_service.update_project(session, row, limit_changes(body)),
    )


@router.get("/keys/{key_id}/limits")
async def get_key_limits(
    response: Response, session: Session, actor: Reader, key_id: str
) -> LimitsOut:
    row = await load_key(session, actor, "limits:read", key_id)
    etag(response, row.version)
    return _out(row)


@router.put("/keys/{key_id}/limits")
async def set_key_limits(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    key_id: str,
    body: Limits,
) -> LimitsOut:
    row = await load_key(session, actor, "limits:write", key_id)
    project = await projects_repository.get(session, row.project_id)
    assert project is not None  # a key's project is a foreign key
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "key.limits",
        row.tenant_id,
        show=lambda: _out(row),
        apply=lambda: keys_service.update_key(session, row, project, limit_changes(body)),
    )

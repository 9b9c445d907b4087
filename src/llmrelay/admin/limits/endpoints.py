"""/api/admin/projects/{id}/limits and /api/admin/keys/{id}/limits: HTTP only. A PUT replaces
the limits and budget whole and needs the project's or key's If-Match (its ETag)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.keys import repository as keys_repository
from llmrelay.admin.keys import service as keys_service
from llmrelay.admin.kit.http import Session, check_if_match, commit_change, etag, fields
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.limits.schemas import LimitsOut, limit_changes
from llmrelay.admin.projects import repository as projects_repository
from llmrelay.admin.projects import service as projects_service
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


async def _project(
    session: AsyncSession, actor: Actor, permission: str, project_id: str
) -> Project:
    row = await projects_repository.get(session, project_id)
    if row is None:
        raise NotFound(f"no project {project_id!r}")
    actor.ensure_project(permission, row.tenant_id, row.id)
    return row


async def _key(session: AsyncSession, actor: Actor, permission: str, key_id: str) -> ApiKey:
    row = await keys_repository.get(session, key_id)
    if row is None:
        raise NotFound(f"no key {key_id!r}")
    actor.ensure_project(permission, row.tenant_id, row.project_id)
    return row


@router.get("/projects/{project_id}/limits")
async def get_project_limits(
    response: Response, session: Session, actor: Reader, project_id: str
) -> LimitsOut:
    row = await _project(session, actor, "limits:read", project_id)
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
    row = await _project(session, actor, "limits:write", project_id)
    check_if_match(request, row.version)
    before = fields(_out(row))
    await projects_service.update_project(session, row, limit_changes(body))
    out = _out(row)
    audit.note(request, "project.limits", "project", row.id, before, fields(out), row.tenant_id)
    await commit_change(request, session)
    etag(response, row.version)
    return out


@router.get("/keys/{key_id}/limits")
async def get_key_limits(
    response: Response, session: Session, actor: Reader, key_id: str
) -> LimitsOut:
    row = await _key(session, actor, "limits:read", key_id)
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
    row = await _key(session, actor, "limits:write", key_id)
    check_if_match(request, row.version)
    project = await projects_repository.get(session, row.project_id)
    assert project is not None  # a key's project is a foreign key
    before = fields(_out(row))
    await keys_service.update_key(session, row, project, limit_changes(body))
    out = _out(row)
    audit.note(request, "key.limits", "key", row.id, before, fields(out), row.tenant_id)
    await commit_change(request, session)
    etag(response, row.version)
    return out

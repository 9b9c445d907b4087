"""/api/admin/projects: HTTP only; the rules are in service.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor, require
from llmrelay.admin.guardrails import repository as guardrail_bindings
from llmrelay.admin.guardrails import service as guardrails
from llmrelay.admin.kit import handlers, lookups
from llmrelay.admin.kit.http import Changes, Cursor, Limit, Session, etag, tenant_for_create
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.projects import repository, service
from llmrelay.admin.projects.schemas import ProjectOut, ProjectPage, project_out
from llmrelay.store.models import Project

router = APIRouter(tags=["projects"])
Reader = Annotated[Actor, Depends(require("projects:read"))]
Writer = Annotated[Actor, Depends(require("projects:write"))]


async def load(session: AsyncSession, actor: Actor, permission: str, project_id: str) -> Project:
    """The project, or 404 (also for a project of a tenant or outside the projects the actor
    may see: another tenant's ids are never confirmed)."""
    row = await repository.get(session, project_id)
    if row is None:
        raise NotFound(f"no project {project_id!r}")
    actor.ensure_project(permission, row.tenant_id, row.id)
    return row


async def _out(session: AsyncSession, row: Project) -> ProjectOut:
    policy = await lookups.policy_name(session, row.routing_policy_id)
    return project_out(row, policy, await guardrails.bound_names(session, project_id=row.id))


def ensure_guardrails(actor: Actor, tenant_id: str, body: dict[str, Any]) -> None:
    """Binding guardrail policies needs guardrails:write too: whoever may change a project
    or key must not be able to switch a guardrail off with it."""
    if "guardrails" in body:
        actor.ensure("guardrails:write", tenant_id)


@router.get("/projects")
async def list_projects(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    name: str | None = None,
    tenant_id: str | None = None,
) -> ProjectPage:
    """Projects the caller may read, in id order; `name` and `tenant_id` filter."""
    rows, next_cursor = await repository.list_page(
        session,
        where=visible(actor, "projects:read", Project.tenant_id, Project.id),
        tenant_id=tenant_id,
        name=name,
        limit=limit,
        cursor=cursor,
    )
    names = await lookups.policy_names(session, (r.routing_policy_id for r in rows))
    bound = await guardrail_bindings.names_by_scope(session, project_ids=(r.id for r in rows))
    data = [project_out(r, names.get(r.routing_policy_id or ""), bound.get(r.id)) for r in rows]
    return ProjectPage(data=data, next_cursor=next_cursor)


@router.post("/projects", status_code=201)
async def create_project(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    body: Annotated[dict[str, Any], Body(description="a project as in the YAML, without keys")],
    tenant_id: str | None = None,
) -> ProjectOut:
    """A new project: the fields of a YAML `projects[]` entry (docs/configuration.md)."""
    config = service.parse(body)
    tenant = await tenant_for_create(session, actor, "projects:write", tenant_id)
    ensure_guardrails(actor, tenant, body)
    row = await service.create_project(session, tenant, config)
    out = await _out(session, row)
    return await handlers.created(request, response, session, row, "project.create", tenant, out)


@router.get("/projects/{project_id}")
async def get_project(
    response: Response, session: Session, actor: Reader, project_id: str
) -> ProjectOut:
    row = await load(session, actor, "projects:read", project_id)
    etag(response, row.version)
    return await _out(session, row)


@router.patch("/projects/{project_id}")
async def update_project(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    project_id: str,
    changes: Changes,
) -> ProjectOut:
    """A partial change (fields of ProjectConfig), validated whole; needs If-Match."""
    row = await load(session, actor, "projects:write", project_id)
    ensure_guardrails(actor, row.tenant_id, changes)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "project.update",
        row.tenant_id,
        show=lambda: _out(session, row),
        apply=lambda: service.update_project(session, row, changes),
    )


@router.delete("/projects/{project_id}", status_code=204)
async def delete_project(
    request: Request, session: Session, actor: Writer, project_id: str
) -> Response:
    """The project and its keys; needs If-Match."""
    row = await load(session, actor, "projects:write", project_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "project.delete",
        row.tenant_id,
        show=lambda: _out(session, row),
        apply=lambda: service.delete_project(session, row),
    )

"""/api/admin/keys and /api/admin/projects/{id}/keys: HTTP only; the rules are in service.py.
Create and rotate answer with the secret, once; nothing else ever shows it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.guardrails import repository as guardrail_bindings
from llmrelay.admin.guardrails import service as guardrails
from llmrelay.admin.keys import repository, service
from llmrelay.admin.keys.schemas import IssuedKeyOut, KeyOut, KeyPage, Rotation, issued_out, key_out
from llmrelay.admin.kit import handlers, lookups
from llmrelay.admin.kit.http import Changes, Cursor, Limit, Session, commit_change, etag, fields
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.projects.endpoints import ensure_guardrails
from llmrelay.admin.projects.endpoints import load as load_project
from llmrelay.store.models import ApiKey

router = APIRouter(tags=["keys"])
Reader = Annotated[Actor, Depends(require("keys:read"))]
Writer = Annotated[Actor, Depends(require("keys:write"))]


async def load(session: AsyncSession, actor: Actor, permission: str, key_id: str) -> ApiKey:
    row = await repository.get(session, key_id)
    if row is None:
        raise NotFound(f"no key {key_id!r}")
    actor.ensure_project(permission, row.tenant_id, row.project_id)
    return row


async def _out(session: AsyncSession, row: ApiKey) -> KeyOut:
    policy = await lookups.policy_name(session, row.routing_policy_id)
    return key_out(row, policy, await guardrails.bound_names(session, key_id=row.id))


@router.get("/keys")
async def list_keys(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    project_id: str | None = None,
    status: Literal["active", "disabled", "revoked"] | None = None,
) -> KeyPage:
    """Keys the caller may read (never their secrets), in id order."""
    rows, next_cursor = await repository.list_page(
        session,
        where=visible(actor, "keys:read", ApiKey.tenant_id, ApiKey.project_id),
        project_id=project_id,
        status=status,
        limit=limit,
        cursor=cursor,
    )
    names = await lookups.policy_names(session, (r.routing_policy_id for r in rows))
    bound = await guardrail_bindings.names_by_scope(session, key_ids=(r.id for r in rows))
    data = [key_out(r, names.get(r.routing_policy_id or ""), bound.get(r.id)) for r in rows]
    return KeyPage(data=data, next_cursor=next_cursor)


@router.post("/projects/{project_id}/keys", status_code=201)
async def create_key(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    project_id: str,
    body: Annotated[dict[str, Any], Body(description="a key as in the YAML")],
) -> IssuedKeyOut:
    """A new key: the fields of a YAML `keys[]` entry. The answer carries its secret, this
    once (`key`: generated unless the body gives one of at least 20 characters)."""
    project = await load_project(session, actor, "keys:write", project_id)
    ensure_guardrails(actor, project.tenant_id, body)
    config = service.parse(body)
    issued = await service.create_key(session, project, config)
    row = issued.row
    out = await _out(session, row)
    await handlers.created(request, response, session, row, "key.create", project.tenant_id, out)
    return IssuedKeyOut.model_validate({**out.model_dump(), "key": issued.secret})


@router.get("/keys/{key_id}")
async def get_key(response: Response, session: Session, actor: Reader, key_id: str) -> KeyOut:
    row = await load(session, actor, "keys:read", key_id)
    etag(response, row.version)
    return await _out(session, row)


@router.patch("/keys/{key_id}")
async def update_key(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    key_id: str,
    changes: Changes,
) -> KeyOut:
    """A partial change (fields of KeyConfig except `key`: rotate for a new secret)."""
    row = await load(session, actor, "keys:write", key_id)
    project = await load_project(session, actor, "keys:write", row.project_id)
    ensure_guardrails(actor, row.tenant_id, changes)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "key.update",
        row.tenant_id,
        show=lambda: _out(session, row),
        apply=lambda: service.update_key(session, row, project, changes),
    )


@router.post("/keys/{key_id}/rotate")
async def rotate_key(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    key_id: str,
    rotation: Rotation | None = None,
) -> IssuedKeyOut:
    """A new secret for the key (shown once); the old one stops now, or after `grace_s`."""
    row = await load(session, actor, "keys:write", key_id)
    before = fields(await _out(session, row))
    issued = await service.rotate_key(session, row, (rotation or Rotation()).grace_s)
    out = await _out(session, row)
    audit.note(request, "key.rotate", "key", row.id, before, fields(out), row.tenant_id)
    await commit_change(request, session)
    etag(response, row.version)
    policy = await lookups.policy_name(session, row.routing_policy_id)
    bound = await guardrails.bound_names(session, key_id=row.id)
    return issued_out(row, policy, issued.secret, bound)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(
    request: Request, response: Response, session: Session, actor: Writer, key_id: str
) -> KeyOut:
    """Revoke for good (idempotent: revoking a revoked key changes nothing)."""
    row = await load(session, actor, "keys:write", key_id)
    before = fields(await _out(session, row))
    if await service.revoke_key(session, row):
        out = await _out(session, row)
        audit.note(request, "key.revoke", "key", row.id, before, fields(out), row.tenant_id)
        await commit_change(request, session)
    else:
        out = await _out(session, row)
    etag(response, row.version)
    return out


@router.delete("/keys/{key_id}", status_code=204)
async def delete_key(request: Request, session: Session, actor: Writer, key_id: str) -> Response:
    row = await load(session, actor, "keys:write", key_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "key.delete",
        row.tenant_id,
        show=lambda: _out(session, row),
        apply=lambda: service.delete_key(session, row),
    )

"""/api/admin/policies: routing policies. HTTP only; the rules are in service.py. Binding a
policy is a field of the project (`routing_policy`) or key that it constrains."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit import handlers
from llmrelay.admin.kit.http import Changes, Cursor, Limit, Session, etag, tenant_for_create
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.policies import repository, service
from llmrelay.admin.policies.schemas import PolicyOut, PolicyPage, policy_out
from llmrelay.store.models import RoutingPolicy

router = APIRouter(tags=["policies"])
Reader = Annotated[Actor, Depends(require("policies:read"))]
Writer = Annotated[Actor, Depends(require("policies:write"))]


async def load(
    session: AsyncSession, actor: Actor, permission: str, policy_id: str
) -> RoutingPolicy:
    row = await repository.get(session, policy_id)
    if row is None:
        raise NotFound(f"no routing policy {policy_id!r}")
    actor.ensure(permission, row.tenant_id)
    return row


@router.get("/policies")
async def list_policies(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    tenant_id: str | None = None,
) -> PolicyPage:
    rows, next_cursor = await repository.list_page(
        session,
        where=visible(actor, "policies:read", RoutingPolicy.tenant_id),
        tenant_id=tenant_id,
        limit=limit,
        cursor=cursor,
    )
    return PolicyPage(data=[policy_out(r) for r in rows], next_cursor=next_cursor)


@router.post("/policies", status_code=201)
async def create_policy(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    body: Annotated[dict[str, Any], Body(description="a routing.policies[] entry")],
    tenant_id: str | None = None,
) -> PolicyOut:
    config = service.parse(body)
    tenant = await tenant_for_create(session, actor, "policies:write", tenant_id)
    row = await service.create_policy(session, tenant, config)
    out = policy_out(row)
    return await handlers.created(request, response, session, row, "policy.create", tenant, out)


@router.get("/policies/{policy_id}")
async def get_policy(
    response: Response, session: Session, actor: Reader, policy_id: str
) -> PolicyOut:
    row = await load(session, actor, "policies:read", policy_id)
    etag(response, row.version)
    return policy_out(row)


@router.patch("/policies/{policy_id}")
async def update_policy(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    policy_id: str,
    changes: Changes,
) -> PolicyOut:
    row = await load(session, actor, "policies:write", policy_id)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "policy.update",
        row.tenant_id,
        show=lambda: policy_out(row),
        apply=lambda: service.update_policy(session, row, changes),
    )


@router.delete("/policies/{policy_id}", status_code=204)
async def delete_policy(
    request: Request, session: Session, actor: Writer, policy_id: str
) -> Response:
    """Refused (409) while a project, key or the gateway-wide setting binds it."""
    row = await load(session, actor, "policies:write", policy_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "policy.delete",
        row.tenant_id,
        show=lambda: policy_out(row),
        apply=lambda: service.delete_policy(session, row),
    )

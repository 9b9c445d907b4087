"""/api/admin/tenants: HTTP only; the rules are in service.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit.http import Cursor, Limit, Session, etag, fields
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.tenants import repository, service
from llmrelay.admin.tenants.schemas import TenantIn, TenantOut, TenantPage, TenantPatch, tenant_out
from llmrelay.admin.versions import commit, expect_version
from llmrelay.store.models import Tenant

router = APIRouter(tags=["tenants"])
Reader = Annotated[Actor, Depends(require("tenants:read"))]
Writer = Annotated[Actor, Depends(require("tenants:write"))]


async def load(session: AsyncSession, actor: Actor, permission: str, tenant_id: str) -> Tenant:
    """The tenant, or 404 (also another tenant's: its existence is never confirmed)."""
    row = await repository.get(session, tenant_id)
    if row is None:
        raise NotFound(f"no tenant {tenant_id!r}")
    actor.ensure(permission, row.id)
    return row


@router.get("/tenants")
async def list_tenants(
    session: Session, actor: Reader, limit: Limit = 50, cursor: Cursor = None
) -> TenantPage:
    """The tenants the caller may read, in id order."""
    rows, next_cursor = await repository.list_page(
        session, visible(actor, "tenants:read", Tenant.id), limit, cursor
    )
    return TenantPage(data=[tenant_out(r) for r in rows], next_cursor=next_cursor)


@router.post("/tenants", status_code=201)
async def create_tenant(
    request: Request, response: Response, session: Session, actor: Writer, body: TenantIn
) -> TenantOut:
    """A new tenant (platform admins only)."""
    audit.note(request, "tenant.create", "tenant", None, None, body.model_dump(mode="json"), None)
    row = await service.create(session, actor, body)
    out = tenant_out(row)
    audit.note(request, "tenant.create", "tenant", row.id, None, fields(out), row.id)
    await commit(session)
    etag(response, out.version)
    return out


@router.get("/tenants/{tenant_id}")
async def get_tenant(
    tenant_id: str, response: Response, session: Session, actor: Reader
) -> TenantOut:
    row = await load(session, actor, "tenants:read", tenant_id)
    etag(response, row.version)
    return tenant_out(row)


@router.patch("/tenants/{tenant_id}")
async def update_tenant(
    request: Request,
    response: Response,
    tenant_id: str,
    body: TenantPatch,
    session: Session,
    actor: Writer,
) -> TenantOut:
    """Rename a tenant or require two-factor of its members (If-Match, or `version`)."""
    row = await load(session, actor, "tenants:write", tenant_id)
    before = fields(tenant_out(row))
    audit.note(request, "tenant.update", "tenant", row.id, None, None, row.id)
    expect_version(request, body.version, row.version)
    service.update(row, body)
    await session.flush()
    out = tenant_out(row)
    audit.note(request, "tenant.update", "tenant", row.id, before, fields(out), row.id)
    await commit(session)
    etag(response, out.version)
    return out

"""/api/admin/tenants/{tenant_id}/preferences: HTTP only; the rules are in service.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit.http import Session, commit_change, etag, fields
from llmrelay.admin.preferences import service
from llmrelay.admin.preferences.schemas import PreferencesIn, PreferencesOut
from llmrelay.admin.tenants.endpoints import load as load_tenant
from llmrelay.admin.versions import expect_version

router = APIRouter(tags=["tenants"])
Reader = Annotated[Actor, Depends(require("tenants:read"))]
Writer = Annotated[Actor, Depends(require("tenants:write"))]


@router.get("/tenants/{tenant_id}/preferences")
async def get_preferences(
    tenant_id: str, response: Response, session: Session, actor: Reader
) -> PreferencesOut:
    tenant = await load_tenant(session, actor, "tenants:read", tenant_id)
    etag(response, tenant.version)
    return await service.read(session, tenant)


@router.put("/tenants/{tenant_id}/preferences")
async def put_preferences(
    request: Request,
    response: Response,
    tenant_id: str,
    body: PreferencesIn,
    session: Session,
    actor: Writer,
) -> PreferencesOut:
    """Change the fields sent (null clears one; one left out stays); If-Match, or `version`.
    The data plane follows within seconds (the config generation moves)."""
    tenant = await load_tenant(session, actor, "tenants:write", tenant_id)
    before = fields(await service.read(session, tenant))
    audit.note(request, "tenant.preferences", "tenant", tenant.id, None, None, tenant.id)
    expect_version(request, body.version, tenant.version)
    await service.update_preferences(session, tenant, body)
    out = await service.read(session, tenant)
    audit.note(request, "tenant.preferences", "tenant", tenant.id, before, fields(out), tenant.id)
    await commit_change(request, session)
    etag(response, out.version)
    return out

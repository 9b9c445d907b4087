"""/api/admin/providers and their model inventory: HTTP only; the rules are in service.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit import handlers
from llmrelay.admin.kit.http import (
    Changes,
    Cursor,
    Limit,
    Session,
    check_if_match,
    commit_change,
    etag,
    state,
    tenant_for_create,
)
from llmrelay.admin.kit.problems import Invalid, NotFound
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.providers import repository, service
from llmrelay.admin.providers.schemas import Inventory, ProviderOut, ProviderPage, provider_out
from llmrelay.store.models import OPERATOR_DECLARED, TENANT_DECLARED, Provider

router = APIRouter(tags=["providers"])
Reader = Annotated[Actor, Depends(require("providers:read"))]
Writer = Annotated[Actor, Depends(require("providers:write"))]


async def load(session: AsyncSession, actor: Actor, permission: str, provider_id: str) -> Provider:
    row = await repository.get(session, provider_id)
    if row is None:
        raise NotFound(f"no provider {provider_id!r}")
    actor.ensure(permission, row.tenant_id)
    return row


def declared_by(actor: Actor) -> str:
    """Whose outbound address policy a base URL this actor sets is judged by: the operator's
    for the admin token and platform admins, a tenant's for everyone else."""
    return OPERATOR_DECLARED if actor.platform_admin else TENANT_DECLARED


def _out(request: Request, row: Provider) -> ProviderOut:
    return provider_out(row, state(request).secrets())


@router.get("/providers")
async def list_providers(
    request: Request,
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    tenant_id: str | None = None,
    type: str | None = None,
) -> ProviderPage:
    rows, next_cursor = await repository.list_page(
        session,
        where=visible(actor, "providers:read", Provider.tenant_id),
        tenant_id=tenant_id,
        type_=type,
        limit=limit,
        cursor=cursor,
    )
    return ProviderPage(data=[_out(request, r) for r in rows], next_cursor=next_cursor)


@router.post("/providers", status_code=201)
async def create_provider(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    body: Annotated[dict[str, Any], Body(description="a provider as in the YAML")],
    tenant_id: str | None = None,
) -> ProviderOut:
    """A new provider: the fields of a YAML `providers[]` entry (`api_key` is sealed and
    never shown again)."""
    config = service.parse(body)
    tenant = await tenant_for_create(session, actor, "providers:write", tenant_id)
    row = await service.create_provider(
        session,
        tenant,
        config,
        state(request).secrets(),
        declared_by=declared_by(actor),
        policies=state(request).outbound,
    )
    out = _out(request, row)
    return await handlers.created(request, response, session, row, "provider.create", tenant, out)


@router.get("/providers/{provider_id}")
async def get_provider(
    request: Request, response: Response, session: Session, actor: Reader, provider_id: str
) -> ProviderOut:
    row = await load(session, actor, "providers:read", provider_id)
    etag(response, row.version)
    return _out(request, row)


@router.patch("/providers/{provider_id}")
async def update_provider(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    provider_id: str,
    changes: Changes,
) -> ProviderOut:
    """A partial change; `api_key` / `headers` replace the stored ones when given."""
    row = await load(session, actor, "providers:write", provider_id)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "provider.update",
        row.tenant_id,
        show=lambda: _out(request, row),
        apply=lambda: service.update_provider(
            session,
            row,
            changes,
            state(request).secrets(),
            declared_by=declared_by(actor),
            policies=state(request).outbound,
        ),
    )


@router.delete("/providers/{provider_id}", status_code=204)
async def delete_provider(
    request: Request, session: Session, actor: Writer, provider_id: str
) -> Response:
    """Refused (409) while routes or routing policies still name the provider."""
    row = await load(session, actor, "providers:write", provider_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "provider.delete",
        row.tenant_id,
        show=lambda: _out(request, row),
        apply=lambda: service.delete_provider(session, row),
    )


@router.get("/providers/{provider_id}/models")
async def get_inventory(
    response: Response, session: Session, actor: Reader, provider_id: str
) -> Inventory:
    """The upstream models the provider offers, as last stored (null: never listed)."""
    row = await load(session, actor, "providers:read", provider_id)
    etag(response, row.version)
    return Inventory(provider_id=row.id, models=row.model_inventory, version=row.version)


@router.put("/providers/{provider_id}/models")
async def set_inventory(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    provider_id: str,
    body: Annotated[dict[str, Any], Body(description='{"models": ["id", {"id": ...}, ...]}')],
) -> Inventory:
    """Replace the inventory (ids, or objects with an `id`); needs the provider's If-Match."""
    row = await load(session, actor, "providers:write", provider_id)
    check_if_match(request, row.version)
    models = body.get("models")
    if not isinstance(models, list):
        raise Invalid("models: a list of model ids", "models")
    before = {"models": row.model_inventory}
    if await service.set_inventory(session, row, models):
        after = {"models": row.model_inventory}
        audit.note(request, "provider.inventory", "provider", row.id, before, after, row.tenant_id)
        await commit_change(request, session)
    etag(response, row.version)
    return Inventory(provider_id=row.id, models=row.model_inventory, version=row.version)

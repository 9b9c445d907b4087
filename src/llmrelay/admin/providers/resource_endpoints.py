"""/api/admin/providers/{provider_id}/resources: a provider's accounts. HTTP only; the
rules are in resource_service.py. The provider's permissions apply (providers:read,
providers:write)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import handlers
from llmrelay.admin.kit.http import Changes, Session, etag, state
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.providers import resource_service as service
from llmrelay.admin.providers.endpoints import Reader, Writer, load
from llmrelay.admin.providers.resource_schemas import ResourceOut, ResourcePage, resource_out
from llmrelay.store.models import ProviderResource

router = APIRouter(tags=["providers"])


def _out(request: Request, row: ProviderResource) -> ResourceOut:
    breakers = state(request).breakers
    health = "closed" if breakers is None else breakers.state(f"resource:{row.id}")
    return resource_out(row, state(request).secrets(), health)


async def _load(session: AsyncSession, provider_id: str, resource_id: str) -> ProviderResource:
    row = await service.get(session, provider_id, resource_id)
    if row is None:
        raise NotFound(f"no resource {resource_id!r} of provider {provider_id!r}")
    return row


@router.get("/providers/{provider_id}/resources")
async def list_resources(
    request: Request, session: Session, actor: Reader, provider_id: str
) -> ResourcePage:
    """The provider's resources by (priority, position), each with its health."""
    await load(session, actor, "providers:read", provider_id)
    rows = await service.resources_of(session, provider_id)
    return ResourcePage(data=[_out(request, row) for row in rows])


@router.post("/providers/{provider_id}/resources", status_code=201)
async def create_resource(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    provider_id: str,
    body: Annotated[dict[str, Any], Body(description="a resource as in the YAML")],
) -> ResourceOut:
    """A new account of the provider: the fields of a YAML `resources[]` entry (`api_key`
    is sealed and never shown again)."""
    provider = await load(session, actor, "providers:write", provider_id)
    config = service.parse(body)
    row = await service.create_resource(session, provider, config, state(request).secrets())
    out = _out(request, row)
    return await handlers.created(
        request, response, session, row, "provider_resource.create", provider.tenant_id, out
    )


@router.get("/providers/{provider_id}/resources/{resource_id}")
async def get_resource(
    request: Request,
    response: Response,
    session: Session,
    actor: Reader,
    provider_id: str,
    resource_id: str,
) -> ResourceOut:
    await load(session, actor, "providers:read", provider_id)
    row = await _load(session, provider_id, resource_id)
    etag(response, row.version)
    return _out(request, row)


@router.patch("/providers/{provider_id}/resources/{resource_id}")
async def update_resource(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    provider_id: str,
    resource_id: str,
    changes: Changes,
) -> ResourceOut:
    """A partial change (If-Match); `disabled: true` takes the account out of routing until
    an administrator enables it again. `api_key` / `headers` replace the stored ones."""
    provider = await load(session, actor, "providers:write", provider_id)
    row = await _load(session, provider_id, resource_id)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "provider_resource.update",
        provider.tenant_id,
        show=lambda: _out(request, row),
        apply=lambda: service.update_resource(
            session, provider, row, changes, state(request).secrets()
        ),
    )


@router.delete("/providers/{provider_id}/resources/{resource_id}", status_code=204)
async def delete_resource(
    request: Request, session: Session, actor: Writer, provider_id: str, resource_id: str
) -> Response:
    provider = await load(session, actor, "providers:write", provider_id)
    row = await _load(session, provider_id, resource_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "provider_resource.delete",
        provider.tenant_id,
        show=lambda: _out(request, row),
        apply=lambda: service.delete_resource(session, provider, row),
    )

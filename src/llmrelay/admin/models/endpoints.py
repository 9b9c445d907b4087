"""/api/admin/models and /api/admin/models/{id}/routes: HTTP only; the rules are in
service.py and routes.py. A route change moves its own version (its ETag), not the model's."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit import handlers
from llmrelay.admin.kit.http import Changes, Cursor, Limit, Session, etag, tenant_for_create
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.models import repository, routes, service
from llmrelay.admin.models.schemas import ModelOut, ModelPage, RouteOut, model_out, route_out
from llmrelay.admin.prices import repository as prices_repository
from llmrelay.store.models import Route, VirtualModel

router = APIRouter(tags=["models"])
Reader = Annotated[Actor, Depends(require("models:read"))]
Writer = Annotated[Actor, Depends(require("models:write"))]


async def load(session: AsyncSession, actor: Actor, permission: str, model_id: str) -> VirtualModel:
    row = await repository.get(session, model_id)
    if row is None:
        raise NotFound(f"no model {model_id!r}")
    actor.ensure(permission, row.tenant_id)
    return row


async def _route(session: AsyncSession, model: VirtualModel, route_id: str) -> Route:
    row = await repository.get_route(session, route_id)
    if row is None or row.model_id != model.id:
        raise NotFound(f"no route {route_id!r} in model {model.name!r}")
    return row


async def _out(session: AsyncSession, row: VirtualModel) -> ModelOut:
    return model_out(
        row,
        await repository.routes(session, row.id),
        await repository.provider_slugs(session, row.tenant_id),
        await prices_repository.for_model(session, row.id),
    )


async def _route_out(session: AsyncSession, model: VirtualModel, row: Route) -> RouteOut:
    return route_out(row, await repository.provider_slugs(session, model.tenant_id))


@router.get("/models")
async def list_models(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    name: str | None = None,
    tenant_id: str | None = None,
) -> ModelPage:
    rows, next_cursor = await repository.list_page(
        session,
        where=visible(actor, "models:read", VirtualModel.tenant_id),
        tenant_id=tenant_id,
        name=name,
        limit=limit,
        cursor=cursor,
    )
    ids = [r.id for r in rows]
    routes_of = await repository.routes_of(session, ids)
    slugs = await repository.slugs_of(session, {r.tenant_id for r in rows})
    prices = await prices_repository.for_models(session, ids)
    data = [model_out(r, routes_of[r.id], slugs, prices[r.id]) for r in rows]
    return ModelPage(data=data, next_cursor=next_cursor)


@router.post("/models", status_code=201)
async def create_model(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    body: Annotated[dict[str, Any], Body(description="a model as in the YAML, with its routes")],
    tenant_id: str | None = None,
) -> ModelOut:
    """A new virtual model: the fields of a YAML `models[]` entry, routes included."""
    config = service.parse(body)
    tenant = await tenant_for_create(session, actor, "models:write", tenant_id)
    row = await service.create_model(session, tenant, config)
    out = await _out(session, row)
    return await handlers.created(request, response, session, row, "model.create", tenant, out)


@router.get("/models/{model_id}")
async def get_model(response: Response, session: Session, actor: Reader, model_id: str) -> ModelOut:
    row = await load(session, actor, "models:read", model_id)
    etag(response, row.version)
    return await _out(session, row)


@router.patch("/models/{model_id}")
async def update_model(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    model_id: str,
    changes: Changes,
) -> ModelOut:
    """A partial change; `routes`, when given, replaces the whole list (as the file does)."""
    row = await load(session, actor, "models:write", model_id)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "model.update",
        row.tenant_id,
        show=lambda: _out(session, row),
        apply=lambda: service.update_model(session, row, changes),
    )


@router.delete("/models/{model_id}", status_code=204)
async def delete_model(
    request: Request, session: Session, actor: Writer, model_id: str
) -> Response:
    """The model, its routes and prices; refused (409) while something names it."""
    row = await load(session, actor, "models:write", model_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "model.delete",
        row.tenant_id,
        show=lambda: _out(session, row),
        apply=lambda: service.delete_model(session, row),
    )


@router.post("/models/{model_id}/routes", status_code=201)
async def add_route(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    model_id: str,
    body: Annotated[dict[str, Any], Body(description="a route as in the YAML")],
) -> RouteOut:
    model = await load(session, actor, "models:write", model_id)
    row = await routes.add_route(session, model, routes.parse(body))
    out = await _route_out(session, model, row)
    return await handlers.created(
        request, response, session, row, "route.create", model.tenant_id, out
    )


@router.get("/models/{model_id}/routes/{route_id}")
async def get_route(
    response: Response, session: Session, actor: Reader, model_id: str, route_id: str
) -> RouteOut:
    model = await load(session, actor, "models:read", model_id)
    row = await _route(session, model, route_id)
    etag(response, row.version)
    return await _route_out(session, model, row)


@router.patch("/models/{model_id}/routes/{route_id}")
async def update_route(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    model_id: str,
    route_id: str,
    changes: Changes,
) -> RouteOut:
    """A partial change of one route (for example `disabled: true`); needs its If-Match."""
    model = await load(session, actor, "models:write", model_id)
    row = await _route(session, model, route_id)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "route.update",
        model.tenant_id,
        show=lambda: _route_out(session, model, row),
        apply=lambda: routes.update_route(session, model, row, changes),
    )


@router.delete("/models/{model_id}/routes/{route_id}", status_code=204)
async def delete_route(
    request: Request, session: Session, actor: Writer, model_id: str, route_id: str
) -> Response:
    """Refused (409) for a model's last route."""
    model = await load(session, actor, "models:write", model_id)
    row = await _route(session, model, route_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "route.delete",
        model.tenant_id,
        show=lambda: _route_out(session, model, row),
        apply=lambda: routes.delete_route(session, model, row),
    )

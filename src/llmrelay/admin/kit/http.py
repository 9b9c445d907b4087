"""The HTTP side every resource router shares: a database session per request, the commit of
a config change (bump the generation in the same transaction, commit, then tell the
replicas), ETag / If-Match, the tenant a new row goes to, and the mapping of service errors
to the admin API's error body."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Query, Request, Response
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from llmrelay.admin.access import Actor
from llmrelay.admin.errors import error_response
from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import (
    Invalid,
    NotFound,
    PreconditionRequired,
    ServiceError,
    Stale,
)
from llmrelay.admin.state import AdminState, state_of
from llmrelay.store.bootstrap import bump_generation, ensure_default_tenant
from llmrelay.store.db import session_factory

_TAG = re.compile(r'^\s*(?:W/)?"?(\d+)"?\s*$')

Limit = Annotated[int, Query(ge=1, le=500, description="rows per page")]
Cursor = Annotated[str | None, Query(max_length=128, description="a page's next_cursor")]
#: A PATCH body: the fields to change, validated whole by the service.
Changes = Annotated[
    dict[str, Any],
    Body(
        description="The fields to change: any of the resource's create body (its config "
        "entry), all optional. They are merged into the stored entry, which is validated whole "
        "as a create is; a field a resource fixes (a key's secret, a model's name, a "
        "provider's slug) answers 400."
    ),
]


def state(request: Request) -> AdminState:
    return state_of(request.scope)


async def _session(request: Request) -> AsyncIterator[AsyncSession]:
    """One unit of work per request: a handler commits it through `commit_change`; anything
    not committed is rolled back when the request ends."""
    async with session_factory(state(request).database())() as session:
        yield session


Session = Annotated[AsyncSession, Depends(_session)]


async def commit_change(request: Request, session: AsyncSession) -> int:
    """Bump the config generation in the change's own transaction, commit, then announce the
    new generation (after the commit: a replica told earlier would read the old one)."""
    generation = await bump_generation(session)
    await session.commit()  # StaleDataError, IntegrityError: 409 (see install)
    publisher = state(request).publisher
    if publisher is not None:
        await publisher.publish(generation)
    return generation


def etag(response: Response, version: int) -> None:
    response.headers["ETag"] = f'"{version}"'


def check_if_match(request: Request, version: int) -> None:
    """428 without If-Match, 409 when it names another version than the stored one."""
    sent = request.headers.get("if-match")
    if sent is None:
        raise PreconditionRequired()
    if sent.strip() == "*":
        return
    match = _TAG.match(sent)
    if match is None or int(match.group(1)) != version:
        raise Stale(f"the resource is at version {version}; read it again")


async def tenant_for_create(
    session: AsyncSession, actor: Actor, permission: str, tenant_id: str | None
) -> str:
    """The tenant a new row goes to: the one asked for (checked), else the actor's only one
    with the permission; the platform admin's default is the default tenant."""
    if tenant_id is not None:
        actor.ensure(permission, tenant_id)
        if not await lookups.tenant_exists(session, tenant_id):
            raise NotFound(f"tenant_id: no tenant {tenant_id!r}", "tenant_id")
        return tenant_id
    scope = actor.tenants_for(permission)
    if scope is None:
        return (await ensure_default_tenant(session)).id
    if len(scope) == 1:
        return next(iter(scope))
    raise Invalid("tenant_id: you belong to several tenants: say which", "tenant_id")


async def _service_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return error_response(exc.status, exc.message, exc.kind, exc.field, errors=exc.errors)


async def _stale(_request: Request, _exc: Exception) -> Response:
    """A flush whose `UPDATE ... WHERE version = ?` matched nothing: another writer changed
    the row between this request's read (and If-Match check) and its write."""
    error = Stale()
    return error_response(error.status, error.message, error.kind, error.field)


async def _integrity(_request: Request, exc: Exception) -> Response:
    """A unique key a concurrent writer took first (the services check names before writing,
    so only a race gets here)."""
    assert isinstance(exc, IntegrityError)
    return error_response(409, f"conflicts with a concurrent change: {exc.orig}", "conflict")


def install(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(StaleDataError, _stale)
    app.add_exception_handler(IntegrityError, _integrity)


def fields(model: BaseModel) -> dict[str, Any]:
    """A response model as the audit log's before/after (JSON values, no timestamps)."""
    return model.model_dump(mode="json", exclude={"created_at", "updated_at"})

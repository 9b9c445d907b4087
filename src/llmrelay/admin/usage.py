"""Usage and request records: /api/admin/usage/summary, /usage/timeseries, /requests and
/requests/{request_id}. Filters: project and key (name or id), model (virtual model name),
provider (slug), since and until (ISO 8601; no zone = UTC; `until` excluded)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.admin import usage_query
from llmrelay.admin.access import Actor, require
from llmrelay.admin.errors import AdminError
from llmrelay.admin.kit.params import When
from llmrelay.admin.state import state_of
from llmrelay.admin.usage_schemas import RequestDetail, RequestPage, UsageFigures, UsageSeries

router = APIRouter(tags=["usage"])

#: Usage is read with usage:read; each caller sees its tenants' projects only (a member
#: limited to some projects, those), the admin token and platform admins every project.
Reader = Annotated[Actor, Depends(require("usage:read"))]

Name = Annotated[str | None, Query(min_length=1, max_length=200)]


@dataclass
class Filters:
    """The filters every usage route takes, from the query string."""

    project: Name = None
    key: Name = None
    model: Name = None
    provider: Name = None
    #: A provider resource's id: only what it served.
    resource: Name = None
    since: When = None
    until: When = None


Filtered = Annotated[Filters, Depends()]


async def _visible(conn: AsyncConnection, actor: Actor) -> frozenset[str] | None:
    tenants = actor.tenants_for("usage:read")
    limited = {t: actor.project_scope(t) for t in tenants or ()}
    return await usage_query.visible_projects(conn, tenants, limited)


# The queries build plain dicts (cheap for long series); each route declares its model as
# `response_model`, which pydantic-core validates and serializes (admin/usage_schemas.py).


@router.get("/usage/summary", response_model=UsageFigures)
async def usage_summary(request: Request, filters: Filtered, actor: Reader) -> dict[str, Any]:
    """Requests, tokens and cost over the filtered records."""
    async with state_of(request.scope).database().connect() as conn:
        where = await usage_query.resolve(
            conn, **vars(filters), visible=await _visible(conn, actor)
        )
        return await usage_query.summary(conn, where)


@router.get("/usage/timeseries", response_model=UsageSeries)
async def usage_timeseries(
    request: Request,
    filters: Filtered,
    actor: Reader,
    bucket: Literal["hour", "day"] = "hour",
    group_by: Literal["model", "provider", "resource", "project", "key"] | None = None,
) -> dict[str, Any]:
    """Per bucket (and group): requests, error rate, tokens, cost, p50/p95 latency and time
    to first byte."""
    async with state_of(request.scope).database().connect() as conn:
        where = await usage_query.resolve(
            conn, **vars(filters), visible=await _visible(conn, actor)
        )
        series = await usage_query.timeseries(conn, where, bucket, group_by)
    return {"bucket": bucket, "group_by": group_by, "data": series}


def _cursor(value: int | None) -> str | None:
    return None if value is None else base64.urlsafe_b64encode(str(value).encode()).decode()


def _after(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        value = int(base64.urlsafe_b64decode(cursor.encode()).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        value = 0
    if not 0 < value < 2**63:  # record ids are positive BIGINTs
        raise AdminError(400, "cursor: not a cursor this API gave", field="cursor")
    return value


@router.get("/requests", response_model=RequestPage)
async def list_requests(
    request: Request,
    filters: Filtered,
    actor: Reader,
    status: Annotated[int | None, Query(ge=100, le=599)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> dict[str, Any]:
    """Request records, newest first; `next_cursor` fetches the next page."""
    after = _after(cursor)
    async with state_of(request.scope).database().connect() as conn:
        where = await usage_query.resolve(
            conn, **vars(filters), visible=await _visible(conn, actor)
        )
        rows, last = await usage_query.page(conn, where, status, limit, after)
    return {"data": rows, "next_cursor": _cursor(last)}


@router.get("/requests/{request_id}", response_model=RequestDetail)
async def get_request(request: Request, request_id: str, actor: Reader) -> dict[str, Any]:
    """One request's record with its upstream attempts, and its captured bodies under
    `payload` when its key captures them (else `payload` is null)."""
    if not 1 <= len(request_id) <= 64:
        raise AdminError(400, "request_id: 1 to 64 characters", field="request_id")
    async with state_of(request.scope).database().connect() as conn:
        record = await usage_query.one(conn, request_id, await _visible(conn, actor))
    if record is None:
        raise AdminError(404, f"no request {request_id!r}", "not_found")
    return record

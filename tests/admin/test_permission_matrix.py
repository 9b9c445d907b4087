"""The permission matrix, generated from the role table (access.ROLE_PERMISSIONS): every role
x every identity, tenant, audit and usage route x its own tenant and another tenant, over the
real admin app and database. What a role may do in its tenant succeeds; what it may not is
403; another tenant's rows are 404 (or 403 for a role without the permission anywhere) or
absent from lists, never data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.access import ROLE_PERMISSIONS, Role
from llmrelay.admin.state import AdminState
from llmrelay.store import rollups
from llmrelay.store.db import session_factory
from llmrelay.store.models import RequestRecord, UsageRollupDirty
from llmrelay.store.models_access import AuditEntry
from llmrelay.store.types import utcnow
from tests.admin.access_support import (
    PASSWORD,
    add_project,
    add_tenant,
    add_user,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
)


@dataclass
class Side:
    """One tenant's rows the routes are aimed at."""

    tenant: str
    project: str
    member: str  # a viewer of this tenant only
    spare: str  # a viewer to remove
    request_id: str
    email: str


@dataclass
class World:
    own: Side
    other: Side
    floater: str  # an account in no tenant


Body = Callable[[World, Side, int], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # {tenant}, {member}, {spare}, {request} come from the side aimed at
    permission: str
    kind: Literal["item", "list"]
    body: Body | None = None
    #: only a platform admin, whatever its role table says (creating tenants)
    platform_only: bool = False
    #: for lists: what in the answer shows a side's rows
    shows: Callable[[Any, Side], bool] | None = None


def _ids(answer: Any, key: str = "id") -> set[Any]:
    return {row[key] for row in answer["data"]}


def _sum_requests(answer: Any) -> int:
    return sum(point["requests"] for point in answer["data"])


ROUTES = [
    Route(
        "GET",
        "/tenants",
        "tenants:read",
        "list",
        shows=lambda answer, side: side.tenant in _ids(answer),
    ),
    Route(
        "POST",
        "/tenants",
        "tenants:write",
        "item",
        body=lambda w, s, n: {"slug": f"new-{n}", "name": "New"},
        platform_only=True,
    ),
    Route("GET", "/tenants/{tenant}", "tenants:read", "item"),
    Route(
        "PATCH", "/tenants/{tenant}", "tenants:write", "item", body=lambda w, s, n: {"name": "R"}
    ),
    Route(
        "GET",
        "/users",
        "users:read",
        "list",
        shows=lambda answer, side: side.email in _ids(answer, "email"),
    ),
    Route(
        "POST",
        "/users",
        "users:write",
        "item",
        body=lambda w, s, n: {
            "email": f"made{n}@example.com",
            "password": PASSWORD,
            "tenant_id": s.tenant,
            "role": "viewer",
        },
    ),
    Route("GET", "/users/{member}", "users:read", "item"),
    Route("PATCH", "/users/{member}", "users:write", "item", body=lambda w, s, n: {"name": "N"}),
    Route("GET", "/tenants/{tenant}/members", "users:read", "item"),
    Route(
        "POST",
        "/tenants/{tenant}/members",
        "users:write",
        "item",
        body=lambda w, s, n: {"user_id": w.floater, "role": "viewer"},
    ),
    Route(
        "PATCH",
        "/tenants/{tenant}/members/{member}",
        "users:write",
        "item",
        body=lambda w, s, n: {"role": "auditor"},
    ),
    Route("DELETE", "/tenants/{tenant}/members/{spare}", "users:write", "item"),
    Route(
        "GET",
        "/audit",
        "audit:read",
        "list",
        shows=lambda answer, side: side.tenant in _ids(answer, "tenant_id"),
    ),
    Route(
        "GET",
        "/requests",
        "usage:read",
        "list",
        shows=lambda answer, side: side.request_id in _ids(answer, "request_id"),
    ),
    Route("GET", "/requests/{request}", "usage:read", "item"),
    # each side has one request: a sum of 2 shows both, 1 only one (the own one: see below)
    Route("GET", "/usage/summary", "usage:read", "list", shows=None),
    Route("GET", "/usage/timeseries", "usage:read", "list", shows=None),
]


def _holds(role: Role, permission: str, route: Route) -> bool:
    if role is Role.PLATFORM_ADMIN:
        return True
    return permission in ROLE_PERMISSIONS[role] and not route.platform_only


async def _side(engine: AsyncEngine, slug: str) -> Side:
    tenant = await add_tenant(engine, slug)
    project = await add_project(engine, tenant, f"{slug}-web")
    email = f"member@{slug}.example.com"
    member = await add_user(engine, email, {tenant: "viewer"})
    spare = await add_user(engine, f"spare@{slug}.example.com", {tenant: "viewer"})
    request_id = f"req-{slug}"
    async with session_factory(engine)() as session:
        session.add(
            RequestRecord(
                request_id=request_id,
                created_at=utcnow(),
                tenant_id=tenant,
                project_id=project,
                endpoint="chat.completions",
                status_code=200,
                latency_ms=5.0,
            )
        )
        session.add(
            AuditEntry(
                at=utcnow(),
                actor_kind="token",
                tenant_id=tenant,
                action="seed",
                status_code=200,
                diff={},
            )
        )
        await session.commit()
    return Side(tenant, project, member, spare, request_id, email)


@pytest.mark.parametrize("role", list(Role), ids=[r.value for r in Role])
async def test_every_route_for_the_role(
    role: Role, admin_state: AdminState, engine: AsyncEngine
) -> None:
    world = World(await _side(engine, "own"), await _side(engine, "other"), "")
    world.floater = await add_user(engine, "floater@example.com")
    async with session_factory(engine)() as session:  # as the recorder does for new records
        session.add(UsageRollupDirty(hour=rollups.hour_of(utcnow()), version=1))
        await session.commit()
    if role is Role.PLATFORM_ADMIN:
        await add_user(engine, "actor@example.com", platform_admin=True)
    else:
        await add_user(engine, "actor@example.com", {world.own.tenant: role.value})

    wrong: list[str] = []
    async with console(admin_state, "actor@example.com") as api:
        for n, route in enumerate(ROUTES):
            holds = _holds(role, route.permission, route)
            sides = [("own", world.own), ("other", world.other)]
            if route.kind == "list":
                sides = sides[:1]  # a list is one call: both sides are checked in its answer
            for label, side in sides:
                path = route.path.format(
                    tenant=side.tenant,
                    member=side.member,
                    spare=side.spare,
                    request=side.request_id,
                )
                body = route.body(world, side, n * 2 + len(label)) if route.body else None
                headers = {"If-Match": "*"} if route.method in ("PATCH", "DELETE") else {}
                answer = await api.request(route.method, path, json=body, headers=headers)
                where = f"{role.value} {route.method} {route.path} ({label}): {answer.status_code}"
                status = answer.status_code
                if route.kind == "list":
                    if not holds:
                        if status != 403:
                            wrong.append(f"{where}, expected 403")
                        continue
                    if status != 200:
                        wrong.append(f"{where}, expected 200: {answer.text[:200]}")
                        continue
                    data = answer.json()
                    if route.shows is None:  # usage sums: one request per side
                        total = data["requests"] if "requests" in data else _sum_requests(data)
                        expected = 2 if role is Role.PLATFORM_ADMIN else 1
                        if total != expected:
                            wrong.append(f"{where}, counted {total} requests, not {expected}")
                        continue
                    if not route.shows(data, world.own):
                        wrong.append(f"{where}, its own tenant's rows are missing")
                    if route.shows(data, world.other) != (role is Role.PLATFORM_ADMIN):
                        state = "missing" if role is Role.PLATFORM_ADMIN else "shown"
                        wrong.append(f"{where}, another tenant's rows are {state}")
                    continue
                if role is Role.PLATFORM_ADMIN or (label == "own" and holds):
                    if not 200 <= status < 300:
                        wrong.append(f"{where}, expected success: {answer.text[:200]}")
                elif label == "own":
                    if status != 403:
                        wrong.append(f"{where}, expected 403")
                elif status not in (403, 404) or (
                    status == 403
                    and route.permission in ROLE_PERMISSIONS[role]
                    and not route.platform_only
                ):
                    wrong.append(f"{where}, expected 404 (never another tenant's data)")
    assert not wrong, "\n".join(wrong)


def test_the_matrix_covers_every_identity_and_audit_route() -> None:
    """A route added to these routers without a matrix row fails here."""
    from llmrelay.admin.app import create_admin

    app = create_admin(AdminState("token"))
    paths = app.openapi()["paths"]
    owned = {
        (method.upper(), path)
        for path, operations in paths.items()
        for method in operations
        if path.startswith(("/tenants", "/users", "/audit", "/usage", "/requests"))
    }
    covered = {
        (
            r.method,
            r.path.replace("{tenant}", "{tenant_id}")
            .replace("{member}", "{user_id}")
            .replace("{spare}", "{user_id}")
            .replace("{request}", "{request_id}"),
        )
        for r in ROUTES
    }
    assert owned == covered

"""The permission matrix, generated from the role table (access.ROLE_PERMISSIONS) and the
admin app's own routes (tests/admin/route_table.py declares each once): every caller (each
role as a console session, the admin token, no credentials) x every route x its own tenant,
another tenant, and (for project-owned rows) a project outside a limited developer's list.

What a role may do in its tenant succeeds; what it may not is 403; another tenant's rows are
404 (an error body, never the row) and absent from lists; a developer limited to some projects
gets 404 outside them. State-changing routes refuse a console session without its CSRF token.
The world is built once per module and backend; rows a request destroys are made for it."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from llmrelay.admin.access import ROLE_PERMISSIONS, Role
from llmrelay.admin.app import create_admin
from llmrelay.admin.state import AdminState
from tests.admin.matrix_world import (
    POSTGRESQL,
    SQLITE,
    add_account,
    caller_client,
    callers,
    world,
    worlds,
)
from tests.admin.route_table import (
    ANONYMOUS,
    CALLERS,
    ROUTES,
    TOKEN,
    Route,
    Side,
    World,
    app_routes,
)

__all__ = ["callers", "world", "worlds"]  # fixtures

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

OK = 0  # any 2xx


def expected(route: Route, caller: str, where: str) -> int:
    """OK, or the status the caller must get."""
    if route.kind == "public":
        return OK
    if caller == ANONYMOUS:
        return 401
    if route.kind == "self":
        return route.token_status or OK if caller == TOKEN else OK
    if caller in (TOKEN, Role.PLATFORM_ADMIN.value):
        return OK
    role = Role(caller)
    assert route.permission is not None
    if route.platform_only or route.permission not in ROLE_PERMISSIONS[role]:
        return 403
    if where == "other":
        return 404
    if where == "outside" and role is Role.DEVELOPER:
        return 404
    return OK


def _markers(side: Side) -> set[str]:
    return {str(value) for value in vars(side).values()}


def _outside_markers(side: Side) -> set[str]:
    return {side.outside, side.outside_key, side.outside_request_id}


def _check_list(route: Route, caller: str, world: World, answer: Any) -> list[str]:
    """What is wrong with a list's rows: the own tenant's missing, another's shown."""
    assert route.shows is not None
    shown = route.shows(answer)
    platform = caller in (TOKEN, Role.PLATFORM_ADMIN.value)
    limited = caller == Role.DEVELOPER.value and route.project_scoped
    if any(marker.startswith("requests:") for marker in shown):  # usage sums
        wanted = 4 if platform else 1 if limited else 2  # one request per project
        return [] if shown == {f"requests:{wanted}"} else [f"counted {shown}, not {wanted}"]
    wrong = []
    if not shown & _markers(world.own):
        wrong.append("the own tenant's rows are missing")
    if bool(shown & _markers(world.other)) != platform:
        wrong.append("another tenant's rows are " + ("missing" if platform else "shown"))
    if limited and shown & _outside_markers(world.own):
        wrong.append("rows of projects outside the developer's list are shown")
    return wrong


async def _filtered_to_the_other_tenant(
    world: World, route: Route, caller: str, api: httpx.AsyncClient
) -> list[str]:
    """A list asked for another tenant's rows by filter (tenant_id, project_id, project)
    shows none of them: an error, or no row of that tenant."""
    if caller in (TOKEN, Role.PLATFORM_ADMIN.value):
        return []
    call = await route.build(world, world.own, api)
    other = world.other
    params = {"tenant_id": other.tenant, "project_id": other.project, "project": other.project}
    answer = await api.request(call.method, call.path, params={**call.params, **params})
    label = f"{caller} {call.method} {call.path} filtered to the other tenant: {answer.text[:300]}"
    if answer.status_code != 200:
        return [] if set(answer.json()) == {"error"} else [label]
    assert route.shows is not None
    shown = route.shows(answer.json())
    counted = any(m.startswith("requests:") and m != "requests:0" for m in shown)
    if shown & _markers(other) or counted:
        return [label]
    return []


async def _call(
    world: World, route: Route, side: Side, api: httpx.AsyncClient
) -> tuple[httpx.Response, str]:
    call = await route.build(world, side, api)
    headers = {"If-Match": "*"} if call.method in ("PATCH", "PUT", "DELETE") else {}
    answer = await api.request(
        call.method, call.path, json=call.json, params=call.params, headers=headers
    )
    return answer, f"{call.method} {call.path}"


#: Every caller on SQLite; on PostgreSQL (a reduced run) the roles whose answers depend on
#: the tenant and project filters of the queries.
CASES = [(SQLITE, caller) for caller in CALLERS] + [
    pytest.param(POSTGRESQL.values[0], caller, marks=POSTGRESQL.marks)
    for caller in (Role.TENANT_ADMIN.value, Role.DEVELOPER.value)
]


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r.method} {r.path}" for r in ROUTES])
@pytest.mark.parametrize(("world", "caller"), CASES, indirect=["world"], scope="module")
@MODULE_LOOP
async def test_matrix(
    world: World, callers: dict[str, httpx.AsyncClient], caller: str, route: Route
) -> None:
    if route.kind == "tenant":
        sides = [("own", world.own), ("other", world.other)]
        if route.project_scoped:
            sides.append(("outside", world.own.outside_view()))
    else:
        sides = [("own", world.own)]
    wrong: list[str] = []
    for where, side in sides:
        async with AsyncExitStack() as stack:
            api = callers[caller]
            if route.kind in ("self", "public"):  # its own account and session: it changes them
                email = f"self{world.n()}@example.com"
                if caller not in (TOKEN, ANONYMOUS):
                    await add_account(world, caller, email)
                if route.kind == "public":
                    api = await stack.enter_async_context(world.client())
                else:
                    api = await stack.enter_async_context(caller_client(world, caller, email))
            answer, sent = await _call(world, route, side, api)
        status, want = answer.status_code, expected(route, caller, where)
        label = f"{caller} {sent} ({where}): {status} {answer.text[:300]}"
        if want == OK:
            if not 200 <= status < 300:
                wrong.append(f"{label}: expected success")
            elif route.shows is not None:
                wrong.extend(
                    f"{label}: {w}" for w in _check_list(route, caller, world, answer.json())
                )
                wrong.extend(await _filtered_to_the_other_tenant(world, route, caller, api))
            continue
        if status != want:
            wrong.append(f"{label}: expected {want}")
        elif set(answer.json()) != {"error"}:
            wrong.append(f"{label}: a refusal must carry only the error")
    assert not wrong, "\n".join(wrong)


def test_every_route_of_the_app_is_in_the_matrix() -> None:
    """A route added to the admin app without an entry in route_table.ROUTES fails here."""
    declared = [r.key for r in ROUTES]
    assert len(declared) == len(set(declared)), "a route is declared twice"
    served = app_routes(create_admin(AdminState("token")).api) - {("GET", "/openapi.json")}
    assert served - set(declared) == set(), "routes missing from route_table.ROUTES"
    assert set(declared) - served == set(), "routes in route_table.ROUTES the app lacks"


MUTATIONS = [r for r in ROUTES if r.mutation and r.kind != "public"]


@pytest.mark.parametrize("route", MUTATIONS, ids=[f"{r.method} {r.path}" for r in MUTATIONS])
@MODULE_LOOP
async def test_a_console_session_needs_its_csrf_token(
    world: World, callers: dict[str, httpx.AsyncClient], route: Route
) -> None:
    """A state-changing request with the session cookie but a missing or wrong X-CSRF-Token
    is refused before anything happens (a platform admin's session: every route is open)."""
    session = callers[Role.PLATFORM_ADMIN.value]
    for token in (None, "not-the-token"):
        async with world.client() as api:
            api.cookies = session.cookies
            if token is not None:
                api.headers["X-CSRF-Token"] = token
            call = await route.build(world, world.own, session)
            answer = await api.request(
                call.method,
                call.path,
                json=call.json,
                params=call.params,
                headers={"If-Match": "*"},
            )
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["type"] == "csrf_failed"

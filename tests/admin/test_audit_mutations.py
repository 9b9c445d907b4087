"""Every state-changing route of the admin app, generated from tests/admin/route_table.py,
leaves exactly one audit entry naming who (actor, role), where (tenant, IP, user agent, the
request id the response carried), what (action, target, status) and the fields it changed,
secrets masked; one failing mutation per route family is audited with its status too. The
app is mounted as llmrelay.app mounts it, behind the ingress."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from llmrelay.admin.access import Role
from llmrelay.gateway.ingress import IngressMiddleware
from tests.admin.access_support import PASSWORD, audit_rows
from tests.admin.matrix_world import BACKENDS, add_account, callers, world, worlds
from tests.admin.route_table import (
    PLANTED,
    ROUTES,
    Route,
    World,
)

__all__ = ["callers", "world", "worlds"]  # fixtures

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
CLIENT_IP = "203.0.113.7"
USER_AGENT = "audit-matrix/1.0"
MUTATIONS = [r for r in ROUTES if r.mutation]


@asynccontextmanager
async def _console(world: World, email: str) -> AsyncIterator[httpx.AsyncClient]:
    """A console session of `email` through the ingress, from CLIENT_IP via a trusted proxy."""
    app = Starlette(
        routes=[Mount("/api/admin", app=world.app)],
        middleware=[
            Middleware(
                IngressMiddleware,
                max_body_bytes=1 << 20,
                trusted_proxies=[ipaddress.ip_network("127.0.0.0/8")],
            )
        ],
    )
    headers = {"User-Agent": USER_AGENT, "X-Forwarded-For": CLIENT_IP}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://admin/api/admin",
        headers=headers,
    ) as api:
        answer = await api.post("/auth/login", json={"email": email, "password": PASSWORD})
        assert answer.status_code == 200, answer.text
        api.headers["X-CSRF-Token"] = answer.json()["csrf_token"]
        yield api


def _diff(row: dict[str, Any]) -> dict[str, Any]:
    found = row["diff"]
    return found if isinstance(found, dict) else dict(json.loads(found))


def _secrets_of(answer: httpx.Response) -> list[str]:
    """Secrets a response shows once (a key, a TOTP secret, recovery codes)."""
    try:
        body = answer.json()
    except ValueError:
        return []
    if not isinstance(body, dict):
        return []
    found = [body[k] for k in ("key", "secret") if isinstance(body.get(k), str)]
    return found + list(body.get("recovery_codes") or [])


@pytest.mark.parametrize("route", MUTATIONS, ids=[f"{r.method} {r.path}" for r in MUTATIONS])
@pytest.mark.parametrize("world", BACKENDS, indirect=True, scope="module")
@MODULE_LOOP
async def test_every_mutation_leaves_one_entry(world: World, route: Route) -> None:
    caller = Role.PLATFORM_ADMIN if route.platform_only else Role.TENANT_ADMIN
    email = f"audited{world.n()}@example.com"
    user_id = await add_account(world, caller.value, email)
    async with _console(world, email) as api:
        call = await route.build(world, world.own, api)
        answer = await api.request(
            call.method, call.path, json=call.json, params=call.params, headers={"If-Match": "*"}
        )
    assert 200 <= answer.status_code < 300, answer.text
    request_id = answer.headers["x-request-id"]
    rows = await audit_rows(world.engine, request_id=request_id)
    assert len(rows) == 1, rows
    row = rows[0]
    made = answer.json().get("id") if answer.content else None
    if route.kind == "public":  # nobody is signed in (yet)
        assert row["actor_kind"] == "anonymous"
        if route.action == "auth.login":
            assert row["actor_email"] == world.own.member_email
        assert row["target_id"] == (call.target or made)
    else:
        assert (row["actor_kind"], row["actor_id"]) == ("user", user_id)
        assert row["actor_email"] == email
        assert row["role"] == caller.value
        wanted = call.target or made or (user_id if route.kind == "self" else None)
        if route.action != "auth.logout":  # names the session, whose id is never shown
            assert row["target_id"] == wanted
    tenants = {
        "tenant": world.own.tenant,
        "self": None,
        "public": made if route.path == "/signup" else None,  # filed under the new tenant
        "global": made if route.path == "/tenants" else None,
    }
    if not route.path.startswith("/users/{user_id}"):  # an account spans tenants: under none
        assert row["tenant_id"] == tenants[route.kind]
    assert row["action"] == route.action
    assert row["status_code"] == answer.status_code
    assert (row["ip"], row["user_agent"]) == (CLIENT_IP, USER_AGENT)
    assert route.empty_diff or _diff(row), "the entry says nothing of what changed"
    # The whole log, not only this entry: the sign-ins before it too, and every entry earlier
    # tests made, whatever order they ran in.
    stored = json.dumps([{k: str(v) for k, v in r.items()} for r in await audit_rows(world.engine)])
    sent = call.json if isinstance(call.json, dict) else {}
    tokens = [sent[k] for k in ("token", "password") if isinstance(sent.get(k), str)]
    for secret in (*PLANTED, *_secrets_of(answer), *tokens):
        assert secret not in stored


# One refused change per route family: (route, what to send, who sends it, the status).
FAILURES: list[tuple[str, str, str, dict[str, Any] | None, Role, int]] = [
    ("projects", "POST", "/projects?tenant_id={tenant}", {"name": "web"}, Role.TENANT_ADMIN, 409),
    ("keys", "POST", "/projects/{project}/keys", {"name": "web-key"}, Role.TENANT_ADMIN, 409),
    ("providers", "PATCH", "/providers/{provider}", {"timeout_s": -1}, Role.TENANT_ADMIN, 400),
    ("models", "PATCH", "/models/{model}", {"deadline_s": -1}, Role.TENANT_ADMIN, 400),
    (
        "routes",
        "PATCH",
        "/models/{model}/routes/{route}",
        {"weight": -1},
        Role.TENANT_ADMIN,
        400,
    ),
    ("prices", "POST", "/models/{model}/prices", {}, Role.BILLING, 400),
    (
        "policies",
        "POST",
        "/policies?tenant_id={tenant}",
        {"name": "eu-only"},
        Role.TENANT_ADMIN,
        409,
    ),
    ("limits", "PUT", "/projects/{project}/limits", {"limits": {"rpm": 0}}, Role.BILLING, 400),
    (
        "guardrails",
        "POST",
        "/guardrails?tenant_id={tenant}",
        {"name": "pii", "rules": [{"detector": "regex", "name": "x", "pattern": "(a)\\1"}]},
        Role.TENANT_ADMIN,
        400,
    ),
    ("settings", "PUT", "/settings/routing", {"breaker": {}}, Role.TENANT_ADMIN, 403),
    ("tenants", "POST", "/tenants", {"slug": "nope", "name": "N"}, Role.TENANT_ADMIN, 403),
    ("users", "PATCH", "/users/{member}", {"name": "V"}, Role.VIEWER, 403),
    (
        "members",
        "POST",
        "/tenants/{tenant}/members",
        {"user_id": "{member}", "role": "viewer"},
        Role.TENANT_ADMIN,
        409,
    ),
    ("keys-by-role", "POST", "/keys/{key}/revoke", None, Role.BILLING, 403),
    (
        "auth",
        "POST",
        "/auth/password",
        {"current_password": "not the password", "new_password": "long enough password"},
        Role.VIEWER,
        403,
    ),
]


@pytest.mark.parametrize("world", BACKENDS, indirect=True, scope="module")
@pytest.mark.parametrize(
    ("family", "method", "path", "body", "role", "status"), FAILURES, ids=[f[0] for f in FAILURES]
)
@MODULE_LOOP
async def test_a_refused_change_is_audited(
    world: World,
    family: str,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    role: Role,
    status: int,
) -> None:
    email = f"refused{world.n()}@example.com"
    user_id = await add_account(world, role.value, email)
    values = vars(world.own)
    if body is not None:
        body = {k: v.format(**values) if isinstance(v, str) else v for k, v in body.items()}
    async with _console(world, email) as api:
        answer = await api.request(
            method, path.format(**values), json=body, headers={"If-Match": "*"}
        )
    assert answer.status_code == status, answer.text
    rows = await audit_rows(world.engine, request_id=answer.headers["x-request-id"])
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row["actor_id"], row["role"], row["status_code"]) == (user_id, role.value, status)
    if family not in ("settings", "tenants", "users", "auth"):  # those name no tenant
        assert row["tenant_id"] == world.own.tenant
    assert (row["ip"], row["user_agent"]) == (CLIENT_IP, USER_AGENT)

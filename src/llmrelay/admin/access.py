"""Who is calling the admin API and what they may do: roles, permissions and the `require`
dependency every admin route declares.

A permission is `"<resource>:<read|write>"`. `require(permission)` runs before the handler:
it authenticates (the `LLMRELAY_ADMIN_TOKEN` bearer, else the console session cookie with
its CSRF token on state-changing methods), records the actor for the audit log, and refuses
(403) an actor that holds `permission` in no tenant at all. Which tenant a request touches
is only known to the handler, so the handler finishes the check:

    @router.patch("/projects/{project_id}")
    async def update(project_id: str, actor: Annotated[Actor, Depends(require("projects:write"))]):
        project = await repository.get(project_id)           # None -> 404
        actor.ensure("projects:write", project.tenant_id)     # 404 other tenant, 403 role
        actor.ensure_project("projects:write", project.tenant_id, project.id)  # developer scope

and list queries filter by `actor.tenants_for(permission)` (None: every tenant) and, for
project-owned rows (keys, usage), by `actor.project_scope(tenant_id)`.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from fastapi import Request

from llmrelay.admin.errors import AdminError
from llmrelay.admin.roles import Role as Role  # (re-exported: its home before roles.py)
from llmrelay.admin.state import state_of

RESOURCES = (
    "tenants",
    "users",
    "projects",
    "keys",
    "providers",
    "models",  # virtual models and their routes
    "policies",  # routing policies
    "prices",
    "limits",  # limits and budgets
    "usage",
    "audit",
    "playground",
    "jobs",  # durable background jobs (probes, discovery, price sync, retention, ...)
    "billing",  # wallets, the ledger, refunds, top-ups (adjustments: platform admins only)
    "guardrails",  # guardrail policies, their global binding, the audit records of hits
)
ACTIONS = ("read", "write")
PERMISSIONS = frozenset(f"{resource}:{action}" for resource in RESOURCES for action in ACTIONS)

#: Methods that change nothing: no CSRF token needed, no audit entry written.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _all(*resources: str, actions: tuple[str, ...] = ACTIONS) -> frozenset[str]:
    return frozenset(f"{r}:{a}" for r in resources for a in actions)


#: The role table, as data: the permission-matrix tests are generated from it. A role holds
#: its permissions inside the tenants it is a member of; platform_admin holds them in every
#: tenant (and alone may create tenants: a handler check on `actor.platform_admin`).
ROLE_PERMISSIONS: Mapping[Role, frozenset[str]] = {
    Role.PLATFORM_ADMIN: PERMISSIONS,
    Role.TENANT_ADMIN: PERMISSIONS,
    Role.DEVELOPER: _all("keys", "models", "playground")
    | _all("projects", "providers", "usage", "guardrails", actions=("read",)),
    Role.BILLING: _all("limits", "prices", "billing")
    | _all("usage", "projects", actions=("read",)),
    Role.VIEWER: frozenset(p for p in PERMISSIONS if p.endswith(":read") and p != "audit:read"),
    Role.AUDITOR: frozenset({"audit:read", "usage:read", "guardrails:read"}),
}


def check_permission(permission: str) -> str:
    if permission not in PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r} (resources: {', '.join(RESOURCES)})")
    return permission


@dataclass(frozen=True, slots=True)
class Actor:
    """The authenticated caller of one admin request.

    `roles` maps tenant id -> role. `projects` maps tenant id -> the project ids a member is
    limited to there (a developer of some projects), None or absent = every project of the
    tenant. `locked` holds tenants that require two-factor authentication while the user has
    not enabled it: the role there is withheld (403 two_factor_required) until they do."""

    kind: Literal["token", "user"]
    user_id: str | None
    email: str | None
    platform_admin: bool
    roles: Mapping[str, Role]
    session_id: str | None = None
    projects: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    locked: frozenset[str] = frozenset()
    #: The password was set by an admin and not changed yet: only PASSWORD_CHANGE_ROUTES
    #: answer (403 password_change_required elsewhere).
    must_change_password: bool = False

    def can(self, permission: str, tenant_id: str) -> bool:
        check_permission(permission)
        if self.platform_admin:
            return True
        role = self.roles.get(tenant_id)
        if role is None or tenant_id in self.locked:
            return False
        return permission in ROLE_PERMISSIONS[role]

    def tenants_for(self, permission: str) -> frozenset[str] | None:
        """The tenants where the actor holds `permission`; None means every tenant."""
        check_permission(permission)
        if self.platform_admin:
            return None
        return frozenset(t for t in self.roles if self.can(permission, t))

    def ensure(self, permission: str, tenant_id: str) -> None:
        """404 when the actor is no member of the tenant (another tenant's rows are never
        revealed, not even that they exist), 403 when its role lacks the permission."""
        if self.can(permission, tenant_id):
            return
        if tenant_id not in self.roles:
            raise AdminError(404, "not found", "not_found")
        if tenant_id in self.locked:
            raise two_factor_required()
        raise AdminError(
            403,
            f"your role {self.roles[tenant_id].value!r} does not allow {permission}",
            "permission_error",
        )

    def project_scope(self, tenant_id: str) -> frozenset[str] | None:
        """The project ids the actor is limited to in the tenant; None = all of them."""
        if self.platform_admin:
            return None
        return self.projects.get(tenant_id)

    def ensure_project(self, permission: str, tenant_id: str, project_id: str | None) -> None:
        """`ensure`, then 404 for a project outside a project-limited member's list (a
        tenant-wide row, project None, is outside every list)."""
        self.ensure(permission, tenant_id)
        scope = self.project_scope(tenant_id)
        if scope is not None and project_id not in scope:
            raise AdminError(404, "not found", "not_found")

    def role_name(self, tenant_id: str | None) -> str:
        """What the audit log names the actor's role as, for a request on `tenant_id`."""
        if self.platform_admin:
            return Role.PLATFORM_ADMIN.value
        if tenant_id is not None:
            role = self.roles.get(tenant_id)
            return role.value if role is not None else "none"
        return ",".join(sorted({role.value for role in self.roles.values()})) or "none"


def two_factor_required() -> AdminError:
    return AdminError(
        403,
        "this tenant requires two-factor authentication: turn it on first "
        "(POST /api/admin/auth/totp/setup, then POST /api/admin/auth/totp/enable)",
        "two_factor_required",
    )


TOKEN_ACTOR = Actor(
    kind="token", user_id=None, email=None, platform_admin=True, roles={}, session_id=None
)

#: The cookie that carries a console session.
SESSION_COOKIE = "llmrelay_session"
CSRF_HEADER = "x-csrf-token"


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


async def authenticate(request: Request) -> Actor:
    """The caller, from the admin token or the session cookie (CSRF checked for state-changing
    methods); 401 otherwise. Remembered for the audit log."""
    from llmrelay.admin import audit
    from llmrelay.admin.identity import sessions  # the session store needs the models

    state = state_of(request.scope)
    presented = _bearer(request)
    if presented is not None:
        token = state.admin_token
        if token and hmac.compare_digest(presented.encode(), token.encode()):
            audit.set_actor(request, TOKEN_ACTOR)
            return TOKEN_ACTOR
        raise AdminError(401, "the Bearer token is not valid", "authentication_error")
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise AdminError(
            401,
            "sign in (POST /api/admin/auth/login) or send the admin Bearer token "
            "(LLMRELAY_ADMIN_TOKEN)",
            "authentication_error",
        )
    found = await sessions.actor_for(state, cookie)
    if found is None:
        raise AdminError(
            401, "the session has expired or was ended: sign in again", "authentication_error"
        )
    actor, csrf_token = found
    audit.set_actor(request, actor)
    if request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent.encode(), csrf_token.encode()):
            raise AdminError(
                403, f"missing or wrong {CSRF_HEADER} header for this session", "csrf_failed"
            )
    if actor.must_change_password:
        route = getattr(request.scope.get("route"), "path", None)
        if (request.method, route) not in PASSWORD_CHANGE_ROUTES:
            raise AdminError(
                403,
                "your password was set by an administrator and is temporary: change it first "
                "(POST /api/admin/auth/password)",
                "password_change_required",
            )
    return actor


#: What a user whose password an admin set may call before changing it.
PASSWORD_CHANGE_ROUTES = frozenset(
    {("POST", "/auth/password"), ("POST", "/auth/logout"), ("GET", "/auth/me")}
)


def require(permission: str) -> Callable[[Request], Awaitable[Actor]]:
    """A FastAPI dependency: the authenticated actor, refused (403) unless it holds
    `permission` in at least one tenant. The handler checks the tenant it touches with
    `actor.ensure`."""
    check_permission(permission)

    async def dependency(request: Request) -> Actor:
        actor = await authenticate(request)
        if actor.platform_admin or any(actor.can(permission, t) for t in actor.roles):
            return actor
        if any(permission in ROLE_PERMISSIONS[actor.roles[t]] for t in actor.locked):
            raise two_factor_required()
        raise AdminError(403, f"your roles do not allow {permission}", "permission_error")

    dependency.__name__ = f"require_{permission.replace(':', '_')}"
    return dependency

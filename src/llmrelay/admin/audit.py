"""The audit log of the admin API: every authenticated state-changing request leaves one row
(and every authenticated read too when the operator sets LLMRELAY_AUDIT_ADMIN_READS=true).

`AuditMiddleware` wraps the admin app. It gives each request an `AuditContext` (in the ASGI
scope), which `access.authenticate` fills with the actor and handlers fill with what they
changed through `note(...)`. When the response starts, the status is known: the row is
written then, in its own transaction, before the status reaches the client, so a failure
(400, 403, 409...) is audited as surely as a success, and a client that saw its answer can
read the entry. Handlers that never call `note` still get a row, named after their route.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import insert
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmrelay.admin.state import state_of
from llmrelay.store.models_access import AuditEntry
from llmrelay.store.types import utcnow

if TYPE_CHECKING:
    from llmrelay.admin.access import Actor

log = structlog.get_logger(__name__)

_SCOPE_KEY = "llmrelay.audit"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MASK = "***"
#: A key whose lower-cased name contains one of these holds a secret: its values are masked.
_SECRET_MARKERS = (
    "password",
    "secret",
    "api_key",
    "apikey",
    "token",
    "key_material",
    "private",
    "credential",
    "authorization",
    "cookie",
)


def is_secret(name: str) -> bool:
    """By name: `password`, `x-api-key`, `Authorization`, `client_secret`, a bare `key`..."""
    lowered = name.lower().replace("-", "_")
    return any(marker in lowered for marker in _SECRET_MARKERS) or lowered == "key"


def mask(value: Any) -> Any:
    """A copy with the values of secret-named keys replaced by "***", at any depth."""
    if isinstance(value, Mapping):
        return {k: MASK if is_secret(str(k)) else mask(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask(v) for v in value]
    return value


def diff(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """The fields that changed: {name: {"before": ..., "after": ...}}, secrets masked. A
    creation has no "before", a deletion no "after"."""
    old, new = dict(before or {}), dict(after or {})
    changed: dict[str, dict[str, Any]] = {}
    for name in sorted(old.keys() | new.keys()):
        if name in old and name in new and old[name] == new[name]:
            continue
        entry: dict[str, Any] = {}
        if before is not None:
            entry["before"] = MASK if is_secret(name) else mask(old.get(name))
        if after is not None:
            entry["after"] = MASK if is_secret(name) else mask(new.get(name))
        changed[name] = entry
    return changed


@dataclass(slots=True)
class AuditContext:
    """What one request's audit row will say; filled while the request runs."""

    actor: Actor | None = None
    action: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    tenant_id: str | None = None
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: set for routes that write an entry without an authenticated actor (sign-in attempts)
    email: str | None = None
    force: bool = False


def client_ip(request: Request) -> str | None:
    """The client's address as the ingress worked it out (trusted proxies only), else the peer."""
    ingress = request.scope.get("llmrelay")
    found = getattr(ingress, "client_ip", None)
    if isinstance(found, str):
        return found
    return request.client.host if request.client else None


def _context(request: Request) -> AuditContext | None:
    found = request.scope.get(_SCOPE_KEY)
    return found if isinstance(found, AuditContext) else None


def set_actor(request: Request, actor: Actor) -> None:
    context = _context(request)
    if context is not None:
        context.actor = actor


def note(
    request: Request,
    action: str,
    target_type: str,
    target_id: str | None,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    tenant_id: str | None,
) -> None:
    """Say what this request changed (call it once the change is made or decided; calling it
    before a failure that follows is fine too: the row carries the final status). `action`
    is "<resource>.<verb>", e.g. "key.revoke"; `before`/`after` are the resource's fields
    (only the changed ones are kept; secret-named ones are masked)."""
    context = _context(request)
    if context is None:
        return
    context.action = action
    context.target_type = target_type
    context.target_id = target_id
    context.tenant_id = tenant_id
    context.changes = diff(before, after)


def note_sign_in(
    request: Request, email: str, user_id: str | None, action: str = "auth.login"
) -> None:
    """Sign-in attempts are audited though no actor is authenticated yet."""
    context = _context(request)
    if context is None:
        return
    context.force = True
    context.email = email
    context.action = action
    context.target_type = "user"
    context.target_id = user_id


def note_anonymous(
    request: Request,
    action: str,
    target_type: str,
    target_id: str | None,
    email: str | None,
    after: Mapping[str, Any] | None,
    tenant_id: str | None = None,
) -> None:
    """A public route's change (a sign-up, a password reset with an emailed token): audited
    with no actor, under the email it concerns. Never pass a token or a password in `after`."""
    context = _context(request)
    if context is None:
        return
    note(request, action, target_type, target_id, None, after, tenant_id)
    context.force = True
    context.email = email


class AuditMiddleware:
    """Writes the audit row of each state-changing admin request (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            scope.get("method", "GET") in _SAFE_METHODS and not state_of(scope).audit_reads
        ):
            await self.app(scope, receive, send)
            return
        context = AuditContext()
        scope[_SCOPE_KEY] = context
        written = False

        async def audited_send(message: Message) -> None:
            nonlocal written
            if message["type"] == "http.response.start" and not written:
                written = True
                await self._write(scope, context, int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, audited_send)
        except Exception:
            if not written:  # about to become a 500 further out: say so in the log
                written = True
                await self._write(scope, context, 500)
            raise

    async def _write(self, scope: Scope, context: AuditContext, status: int) -> None:
        actor = context.actor
        if actor is None and not context.force:
            return  # not authenticated: nobody to attribute the request to
        engine = state_of(scope).engine
        if engine is None:
            return
        request = Request(scope)
        route = scope.get("route")
        template = getattr(route, "path", None) or request.url.path
        params = scope.get("path_params") or {}
        ingress = scope.get("llmrelay")
        # A request refused before its handler said anything is filed under the tenant its
        # path or query names, if any (so that tenant's auditors see attempts on it), else
        # the actor's only tenant (a 400 or 409 from a resource service names no tenant).
        tenant_id = context.tenant_id or params.get("tenant_id")
        if tenant_id is None and context.action is None:
            tenant_id = request.query_params.get("tenant_id") or _only_tenant(actor)
        if tenant_id is not None and len(tenant_id) > 32:  # not an id: the column holds 32
            tenant_id = None
        entry = {
            "at": utcnow(),
            "actor_kind": actor.kind if actor is not None else "anonymous",
            "actor_id": actor.user_id if actor is not None else None,
            "actor_email": actor.email if actor is not None else context.email,
            "role": actor.role_name(tenant_id) if actor is not None else None,
            "tenant_id": tenant_id,
            "action": (context.action or f"{request.method} {template}")[:100],
            "target_type": (context.target_type or "")[:64] or None,
            # not noted: the most specific id the path names
            "target_id": (context.target_id or ["", *params.values()][-1])[:200] or None,
            "status_code": status,
            "request_id": (
                getattr(ingress, "request_id", None) or request.headers.get("x-request-id") or ""
            )[:64]
            or None,
            "ip": client_ip(request),
            "user_agent": (request.headers.get("user-agent") or "")[:200] or None,
            "diff": context.changes,
        }
        try:
            async with engine.begin() as conn:
                await conn.execute(insert(AuditEntry).values(**_storable(entry)))
        except Exception:  # the change itself is done: say loudly that its entry is missing
            log.exception("audit_write_failed", action=entry["action"], status=status)


def _only_tenant(actor: Actor | None) -> str | None:
    """The tenant a member of exactly one acts in (a platform admin acts in all of them)."""
    if actor is None or actor.platform_admin or len(actor.roles) != 1:
        return None
    return next(iter(actor.roles))


def _storable(value: Any) -> Any:
    """NUL characters (which PostgreSQL refuses in text and JSON) shown as "\\0": an entry
    about a request that carried one must still be written."""
    if isinstance(value, str):
        return value.replace("\x00", "\\0")
    if isinstance(value, Mapping):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value

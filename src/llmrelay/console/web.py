"""What every console page shares: the signed-in visit (its admin client, who the user is,
what the role may use), rendering a template, reading a form, and the two ways a page stops
early (sign in first; refused, with the admin API's words)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote

import structlog
from jinja2 import Environment
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from llmrelay.admin.access import PERMISSIONS, ROLE_PERMISSIONS, Role
from llmrelay.console import flash
from llmrelay.console.admin_client import AdminClient, Answer
from llmrelay.console.base_url import public_base_url
from llmrelay.console.forms import FormState
from llmrelay.console.security import same_origin
from llmrelay.settings import Settings
from llmrelay.store.crypto import Sealer

log = structlog.get_logger(__name__)

SESSION_COOKIE = "llmrelay_session"
#: The session's CSRF token, which the console puts in every form it renders (HttpOnly: only
#: the server reads it; the admin API compares what a form sends with the session's own).
CSRF_COOKIE = "llmrelay_console_csrf"
#: Form field that carries the CSRF token.
CSRF_FIELD = "csrf_token"


@dataclass(slots=True)
class Console:
    """Built once, on the console's first request (app.py)."""

    admin_app: ASGIApp
    settings: Settings
    templates: Environment
    sealer: Callable[[], Sealer | None]


class SignInNeeded(Exception):
    """No session, or an ended one: to the sign-in page, coming back here after."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class PageRefused(Exception):
    """A page that cannot be shown: 403 (the role), 404 (no such row), or what the admin
    API answered, in its words."""

    def __init__(self, status: int, message: str, visit: Visit | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.visit = visit


@dataclass(slots=True)
class Visit:
    """One signed-in page view."""

    request: Request
    console: Console
    admin: AdminClient
    me: Mapping[str, Any]
    permissions: frozenset[str]
    csrf: str
    #: Tenants (id -> role) where the user's role is withheld until two-factor is on.
    locked: dict[str, str] = field(default_factory=dict)
    #: Whether this page showed the flash meant for it (its cookie is then deleted).
    flash_taken: bool = False

    def take_flash(self) -> dict[str, Any] | None:
        """What the form whose redirect led here handed to this page (once), or None."""
        found = flash.read_flash(self.request, self.console.sealer)
        self.flash_taken = self.flash_taken or found is not None
        return found

    def can(self, permission: str) -> bool:
        return permission in self.permissions

    def need(self, permission: str) -> None:
        if permission not in self.permissions:
            raise PageRefused(403, f"your role does not allow {permission}", self)

    @property
    def email(self) -> str:
        user = self.me.get("user") or {}
        return str(user.get("email") or "")

    def tenant_name(self, tenant_id: str | None) -> str:
        """A tenant's name as the user knows it (its memberships carry the names)."""
        for membership in self.me.get("memberships") or ():
            if membership.get("tenant_id") == tenant_id and membership.get("tenant_name"):
                return str(membership["tenant_name"])
        return "another tenant"

    @property
    def platform_admin(self) -> bool:
        return bool(self.me.get("platform_admin"))

    def tenants_for(self, permission: str) -> list[str]:
        """The tenant ids where the user holds `permission` (a platform admin: []: any)."""
        found = []
        for membership in self.me.get("memberships") or ():
            if membership.get("two_factor_required"):
                continue
            role = Role(membership["role"])
            if permission in ROLE_PERMISSIONS[role]:
                found.append(str(membership["tenant_id"]))
        return found

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        return render(self.console, self.request, template, status, visit=self, **values)

    def refused(self, answer: Answer) -> PageRefused:
        """A read the admin API refused, as a page of the same status."""
        status = answer.status if answer.status in (400, 403, 404, 409, 429) else 502
        if answer.status == 401:
            raise SignInNeeded(self.request.url.path)
        return PageRefused(status, answer.message, self)

    async def read(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        """A read the page cannot do without: its body, or the refusal as the page."""
        answer = await self.admin.get(path, query)
        if not answer.ok:
            raise self.refused(answer)
        return answer.body

    def base_url(self) -> str:
        return public_base_url(self.request, self.console.settings.trusted_proxies)

    def api_base_url(self) -> str:
        """Where applications reach the model API: LLMRELAY_PUBLIC_API_URL, else the address
        the browser reached the console at."""
        return self.console.settings.public_api_url or self.base_url()

    @property
    def api_elsewhere_unknown(self) -> bool:
        """The console is on the admin listener and nobody said where the model API is."""
        settings = self.console.settings
        return settings.admin_listen is not None and settings.public_api_url is None


def permissions_of(me: Mapping[str, Any]) -> tuple[frozenset[str], dict[str, str]]:
    """What the user may use somewhere (the union over its tenants), and the tenants whose
    role is withheld until it turns two-factor on. Only to decide what to show: every action
    is checked again by the admin API."""
    if me.get("platform_admin"):
        return frozenset(PERMISSIONS), {}
    held: set[str] = set()
    locked: dict[str, str] = {}
    for membership in me.get("memberships") or ():
        if membership.get("two_factor_required"):
            locked[str(membership["tenant_id"])] = str(membership["role"])
            continue
        held |= ROLE_PERMISSIONS[Role(membership["role"])]
    return frozenset(held), locked


def client_for(console: Console, request: Request, csrf: str | None = None) -> AdminClient:
    return AdminClient(
        console.admin_app,
        request.scope,
        session_cookie=request.cookies.get(SESSION_COOKIE),
        csrf_token=csrf,
    )


class PasswordChangeNeeded(Exception):
    """The user's password was set by an admin: every page shows the change form instead."""

    def __init__(self, visit: Visit) -> None:
        super().__init__("password change required")
        self.visit = visit


async def visit(
    console: Console, request: Request, need: str | None = None, *, temporary_ok: bool = False
) -> Visit:
    """The signed-in user of this request (else SignInNeeded), refused (403) without `need`.
    A form's CSRF token, not the cookie's, is what state-changing calls send. A user whose
    password an admin set sees the change form (PasswordChangeNeeded) unless `temporary_ok`."""
    if not request.cookies.get(SESSION_COOKIE) or not request.cookies.get(CSRF_COOKIE):
        raise SignInNeeded(_here(request))
    csrf = request.cookies.get(CSRF_COOKIE, "")
    admin = client_for(console, request)
    answer = await admin.get("/auth/me")
    if answer.status == 401:
        raise SignInNeeded(_here(request))
    if not answer.ok:
        raise PageRefused(502, answer.message)
    permissions, locked = permissions_of(answer.body)
    found = Visit(request, console, admin, answer.body, permissions, csrf, locked)
    if answer.body.get("password_change_required") and not temporary_ok:
        raise PasswordChangeNeeded(found)
    if need is not None:
        found.need(need)
    return found


async def form_visit(
    console: Console, request: Request, need: str | None = None, *, temporary_ok: bool = False
) -> tuple[Visit, dict[str, str]]:
    """A POSTed form's visit: its fields, and the admin client sending the form's token."""
    found = await visit(console, request, need, temporary_ok=temporary_ok)
    fields = await read_form(request)
    found.admin.csrf_token = fields.get(CSRF_FIELD, "")
    return found, fields


async def read_form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (every console form); the last value of a
    repeated field wins, except the ones read with `read_form_lists`."""
    body = await request.body()
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def _here(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def sign_in_redirect(next_path: str) -> RedirectResponse:
    return RedirectResponse(f"/sign-in?next={quote(next_path, safe='')}", status_code=303)


def see_other(
    path: str, visit: Visit | None = None, handed: Mapping[str, Any] | None = None
) -> RedirectResponse:
    """POST, then redirect (a reload does not post again); cookies the admin API set ride
    along, and `handed` is what the page at `path` shows once (a secret, a result)."""
    response = RedirectResponse(path, status_code=303)
    if visit is not None:
        pass_cookies(response, visit.admin)
        if handed is not None:
            target = path.split("?", 1)[0]
            flash.set_flash(
                response, visit.console.settings, visit.console.sealer(), target, handed
            )
    return response


def pass_cookies(response: Response, admin: AdminClient) -> None:
    for value in admin.cookies:
        response.headers.append("set-cookie", value)


def render(
    console: Console,
    request: Request,
    template: str,
    http_status: int = 200,
    **values: Any,
) -> HTMLResponse:
    page = console.templates.get_template(template)
    visit_: Visit | None = values.get("visit")
    html = page.render(
        request=request,
        path=request.url.path,
        csrf=visit_.csrf if visit_ is not None else values.pop("csrf", ""),
        **values,
    )
    response = HTMLResponse(html, http_status)
    if visit_ is not None:
        pass_cookies(response, visit_.admin)
        if visit_.flash_taken:
            flash.clear_flash(response)
    return response


#: A request of static/live.js for a part of a page: a session that ended is a 401 it shows
#: as a notice, never the sign-in page pasted into the part.
FRAGMENT_HEADER = "x-console-fragment"


async def _signed_out(console: Console, request: Request, next_path: str) -> Response:
    """A page reached without a (live) session: to the sign-in page and back. A form's
    input is kept, sealed, through the sign-in, to be sent again after it."""
    if request.headers.get(FRAGMENT_HEADER):
        return Response("signed out", 401, media_type="text/plain")
    if request.method != "POST":
        return sign_in_redirect(next_path)
    fields = await read_form(request)
    sealer = console.sealer()
    draft = ""
    if sealer is not None:
        kept = flash.draft_of(request.url.path, fields)
        draft = flash.seal(sealer, "/resume", kept, flash.DRAFT_S)
    form = FormState(
        message="Your session ended before this form was sent. Sign in again: what you "
        "typed is kept and shown to you to send again."
    )
    return render(console, request, "sign_in.html", 401, next="/dashboard", form=form, draft=draft)


Handler = Callable[[Console, Request], Awaitable[Response]]


def page(console: Console, path: str, handler: Handler, methods: Sequence[str] = ("GET",)) -> Route:
    """A console route: sign-in redirects, refusals and failures become pages (a failure
    is logged, never shown as a trace), and a form from another site is refused."""

    async def endpoint(request: Request) -> Response:
        try:
            if request.method == "POST" and not same_origin(request):
                raise PageRefused(403, "this form was sent from another site: refused")
            return await handler(console, request)
        except SignInNeeded as stop:
            return await _signed_out(console, request, stop.next_path)
        except PasswordChangeNeeded as stop:
            return render(
                console, request, "password_change.html", 403, visit=stop.visit, form=FormState()
            )
        except PageRefused as stop:
            return render(
                console,
                request,
                "error.html",
                stop.status,
                visit=stop.visit,
                message=stop.message,
                status=stop.status,
            )
        except Exception:  # a page's boundary: logged, and an error page, never a trace
            log.exception("console_error", path=request.url.path)
            message = "the console failed to show this page (the error is in the server log)"
            return render(console, request, "error.html", 500, message=message, status=500)

    return Route(path, endpoint, methods=list(methods))


async def tenant_choices(found: Visit, permission: str) -> list[dict[str, Any]]:
    """The tenants a create may go to, when the user has a choice (else []: the admin API
    takes the only one)."""
    if not found.can(permission):
        return []
    if found.platform_admin:
        rows = (await found.admin.get("/tenants", {"limit": 500})).data
        return rows if len(rows) > 1 else []
    ids = found.tenants_for(permission)
    if len(ids) < 2:
        return []
    names = {}
    if found.can("tenants:read"):
        names = {t["id"]: t["name"] for t in (await found.admin.get("/tenants")).data}
    return [{"id": i, "name": names.get(i, i)} for i in ids]


async def only_tenant(found: Visit, permission: str) -> str | None:
    """The tenant a create goes to when the user has no choice to make."""
    ids = found.tenants_for(permission)
    if ids or not found.platform_admin:
        return ids[0] if len(ids) == 1 else None
    rows = (await found.admin.get("/tenants", {"limit": 2})).data
    return str(rows[0]["id"]) if len(rows) == 1 else None

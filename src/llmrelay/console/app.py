"""The console as one Starlette app, mounted by llmrelay.app after every other route (and
built on its first request, as the admin API is)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from llmrelay import __version__
from llmrelay.console import charts
from llmrelay.console.pages import (
    access,
    accounts,
    activity,
    auth,
    billing,
    dashboard,
    guardrails,
    guides,
    jobs,
    keys,
    models,
    money,
    operations,
    passkeys,
    projects,
    provider_resources,
    providers,
    routing,
    sso,
    usage,
)
from llmrelay.console.security import SecurityHeaders
from llmrelay.console.static import StaticFiles
from llmrelay.console.web import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    Console,
    PageRefused,
    PasswordChangeNeeded,
    SignInNeeded,
    Visit,
    render,
    visit,
)
from llmrelay.settings import Settings
from llmrelay.store.crypto import Sealer


def _templates(static: StaticFiles) -> Environment:
    env = Environment(
        loader=PackageLoader("llmrelay.console", "templates"),
        autoescape=select_autoescape(["html", "svg"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(static=static.url, version=__version__, fmt=charts.fmt)
    env.filters["lookup"] = _lookup
    return env


def _lookup(ids: object, names: Mapping[str, str]) -> list[str]:
    """Ids as the names a page shows (`{{ ids | lookup(project_names) }}`); an id the page
    has no name for (a row the user cannot see) as "another"."""
    if not isinstance(ids, list | tuple):
        return []
    return [names.get(str(i), "another") for i in ids]


def create_console(
    admin_app: ASGIApp, settings: Settings, sealer: Callable[[], Sealer | None]
) -> ASGIApp:
    static = StaticFiles()
    console = Console(admin_app, settings, _templates(static), sealer)

    async def home(request: Request) -> Response:
        if request.cookies.get(SESSION_COOKIE) and request.cookies.get(CSRF_COOKIE):
            return RedirectResponse("/dashboard", status_code=303)
        return RedirectResponse("/sign-in", status_code=303)

    async def not_found(request: Request, exc: Exception) -> Response:
        """404 and 405, with the navigation when the browser is signed in."""
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        message = "no such page" if status == 404 else "this method is not allowed here"
        signed_in: Visit | None = None
        if request.cookies.get(SESSION_COOKIE):
            try:
                signed_in = await visit(console, request)
            except (SignInNeeded, PageRefused):
                signed_in = None
            except PasswordChangeNeeded as stop:  # the error page, its navigation leads there
                signed_in = stop.visit
        return render(
            console, request, "error.html", status, visit=signed_in, message=message, status=status
        )

    routes = [
        Route("/", home, methods=["GET"]),
        Route("/static/{name}", static.serve, methods=["GET"]),
        *auth.routes(console),
        *passkeys.routes(console),
        *accounts.routes(console),
        *dashboard.routes(console),
        *providers.routes(console),
        *provider_resources.routes(console),
        *models.routes(console),
        *keys.routes(console),
        *projects.routes(console),
        *access.routes(console),
        *usage.routes(console),
        *billing.routes(console),
        *activity.routes(console),
        *guides.routes(console),
        *jobs.routes(console),
        *routing.routes(console),
        *guardrails.routes(console),
        *operations.routes(console),
        *money.routes(console),
        *sso.routes(console),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: not_found},
    )
    api = settings.public_api_url
    return SecurityHeaders(app, _origin(api) if api else None)


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"

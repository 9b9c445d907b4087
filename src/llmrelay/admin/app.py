"""The admin API, mounted at /api/admin by llmrelay.app (its OpenAPI document at
/api/admin/openapi.json): one FastAPI app per process, serving each AdminState's requests
with that state in their scope.

One app, not one per AdminState: FastAPI prepares each route (its parameters, bodies and
responses as Pydantic fields) at the app's first request, about half a second of CPU for this
API, and every process that made an app per state paid it again (the in-process tests make
hundreds). The app holds nothing of a state's: handlers and the audit middleware take theirs
from the request's scope (`state_of`)."""

from __future__ import annotations

from functools import cache

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from llmrelay import __version__
from llmrelay.admin import access_routes, errors, resources, usage
from llmrelay.admin.catalogue import endpoints as catalogue
from llmrelay.admin.state import SCOPE_KEY, AdminState


class AdminApp:
    """The admin API serving one AdminState (an ASGI app)."""

    __slots__ = ("api", "state")

    def __init__(self, state: AdminState) -> None:
        self.state = state
        #: The process's FastAPI app (its routes, its OpenAPI document).
        self.api = admin_api()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SCOPE_KEY] = self.state
        await self.api(scope, receive, send)


def create_admin(state: AdminState) -> AdminApp:
    return AdminApp(state)


@cache
def admin_api() -> FastAPI:
    app = FastAPI(
        title="llmrelay admin API",
        version=__version__,
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
        responses=errors.ERRORS,
    )
    app.include_router(usage.router)
    app.include_router(catalogue.router)
    resources.include(app)
    access_routes.include(app)
    errors.install(app)
    return app

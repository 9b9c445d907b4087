"""The admin API as one FastAPI app, mounted at /api/admin by llmrelay.app (its OpenAPI
document at /api/admin/openapi.json)."""

from __future__ import annotations

from fastapi import FastAPI

from llmrelay import __version__
from llmrelay.admin import access_routes, errors, resources, usage
from llmrelay.admin.catalogue import endpoints as catalogue
from llmrelay.admin.state import AdminState


def create_admin(state: AdminState) -> FastAPI:
    app = FastAPI(
        title="llmrelay admin API",
        version=__version__,
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
        responses=errors.ERRORS,
    )
    app.state.admin = state
    app.include_router(usage.router)
    app.include_router(catalogue.router)
    resources.include(app)
    access_routes.include(app, state)
    errors.install(app)
    return app

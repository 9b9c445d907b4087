"""The resource routers of the admin API (projects, keys, providers and their health, models
and routes, routing policies, prices, limits and budgets, jobs, webhooks, billing,
guardrails), mounted by admin/app.py in one call."""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel

from llmrelay.admin.billing import endpoints as billing
from llmrelay.admin.guardrails import endpoints as guardrails
from llmrelay.admin.jobs import endpoints as jobs
from llmrelay.admin.keys import endpoints as keys
from llmrelay.admin.kit import http, openapi
from llmrelay.admin.limits import endpoints as limits
from llmrelay.admin.models import endpoints as models
from llmrelay.admin.policies import endpoints as policies
from llmrelay.admin.prices import endpoints as prices
from llmrelay.admin.projects import endpoints as projects
from llmrelay.admin.providers import codex_endpoints as provider_codex
from llmrelay.admin.providers import endpoints as providers
from llmrelay.admin.providers import health_endpoints as provider_health
from llmrelay.admin.providers import resource_endpoints as provider_resources
from llmrelay.admin.settings import endpoints as settings
from llmrelay.admin.webhooks import endpoints as webhooks
from llmrelay.config.schema import (
    GuardrailPolicyConfig,
    GuardrailsConfig,
    KeyConfig,
    ModelConfig,
    PolicyConfig,
    ProjectConfig,
    ProviderConfig,
    ResourceConfig,
    RouteConfig,
    RoutingConfig,
)

#: Create routes whose body is a YAML entry: the config model, less what the API refuses.
_BODIES: dict[tuple[str, str], tuple[type[BaseModel], tuple[str, ...]]] = {
    ("/projects", "post"): (ProjectConfig, ("keys", "capture")),
    ("/projects/{project_id}/keys", "post"): (KeyConfig, ()),
    ("/providers", "post"): (ProviderConfig, ()),
    ("/providers/{provider_id}/resources", "post"): (ResourceConfig, ()),
    ("/models", "post"): (ModelConfig, ()),
    ("/models/{model_id}/routes", "post"): (RouteConfig, ()),
    ("/policies", "post"): (PolicyConfig, ()),
    ("/settings/routing", "put"): (RoutingConfig, ("policies",)),
    ("/guardrails", "post"): (GuardrailPolicyConfig, ()),
    ("/settings/guardrails", "put"): (GuardrailsConfig, ("policies",)),
}


def include(app: FastAPI) -> None:
    http.install(app)
    for router in (
        projects.router,
        keys.router,
        provider_health.router,  # before providers: /providers/health is no provider id
        providers.router,
        provider_codex.router,
        provider_resources.router,
        models.router,
        prices.router,
        policies.router,
        limits.router,
        settings.router,
        jobs.router,
        webhooks.router,
        billing.router,
        guardrails.router,
    ):
        app.include_router(router)
    openapi.with_bodies(app, _BODIES)

"""The OpenAPI document shows the create routes' bodies as the config schema they are
validated with (not "any object"), less the fields the API refuses."""

from __future__ import annotations

from typing import Any

import httpx


async def test_create_bodies_follow_the_config_schema(anonymous: httpx.AsyncClient) -> None:
    spec = (await anonymous.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]

    def body(path: str, method: str = "post") -> dict[str, Any]:
        ref = spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        found: dict[str, Any] = schemas[ref["$ref"].rsplit("/", 1)[1]]
        return found

    project = body("/projects")
    assert set(project["properties"]) >= {"name", "models", "limits", "monthly_budget_usd"}
    assert "keys" not in project["properties"]
    assert "key" in body("/projects/{project_id}/keys")["properties"]
    assert "api_key" in body("/providers")["properties"]
    assert "routes" in body("/models")["required"]
    assert "upstream_model" in body("/models/{model_id}/routes")["required"]
    assert "policies" not in body("/settings/routing", "put")["properties"]


async def test_errors_are_documented_as_the_app_answers_them(anonymous: httpx.AsyncClient) -> None:
    """400 in the error shape on every route (never FastAPI's 422 and its body), 429 on sign-in."""
    spec = (await anonymous.get("/openapi.json")).json()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)
            error = responses["400"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)
            assert {"401", "403", "404"} <= set(responses), (method, path)
    assert "429" in spec["paths"]["/auth/login"]["post"]["responses"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]

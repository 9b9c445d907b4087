"""Request body schemas in the OpenAPI document. The create routes take their body as a plain
mapping and validate it with the config schema inside the service (so the API and `llmrelay
apply` word every error the same way, with the config's field paths); this puts that config
schema (ProjectConfig, KeyConfig, ...) in the document, so clients and schemathesis see the
real shape instead of "any object"."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

_REF = "#/components/schemas/{model}"


def _body_schema(model: type[BaseModel], without: Iterable[str]) -> tuple[str, dict[str, Any]]:
    found = model.model_json_schema(ref_template=_REF)
    dropped = set(without)
    if not dropped:
        return model.__name__, found
    found = copy.deepcopy(found)
    for name in dropped:
        found.get("properties", {}).pop(name, None)
    found["required"] = [r for r in found.get("required", []) if r not in dropped]
    return f"{model.__name__}Api", found


def with_bodies(
    app: FastAPI, bodies: dict[tuple[str, str], tuple[type[BaseModel], tuple[str, ...]]]
) -> None:
    """`bodies` maps (path, method) to the model its body follows and the fields it drops."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        for (path, method), (model, without) in bodies.items():
            operation = spec.get("paths", {}).get(path, {}).get(method)
            if operation is None:
                continue
            name, schema = _body_schema(model, without)
            for def_name, definition in schema.pop("$defs", {}).items():
                schemas.setdefault(def_name, definition)
            schemas.setdefault(name, schema)
            body = operation.setdefault("requestBody", {"required": True})
            body["content"] = {"application/json": {"schema": {"$ref": _REF.format(model=name)}}}
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]

"""Gemini's Schema (an OpenAPI 3.0 subset: upper-case `type`, `nullable`, `propertyOrdering`)
as JSON Schema, for a provider reached through chat: function `parameters` and
`responseSchema`. (The other direction, JSON Schema to what Gemini accepts, is
gemini.function_parameters.)

https://ai.google.dev/api/caching#Schema
"""

from __future__ import annotations

from typing import Any, Final

#: Keywords with the same meaning in both, copied as they are.
_SAME: Final = (
    "description",
    "title",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "default",
    "example",
)


def json_schema_of(schema: Any) -> dict[str, Any]:
    """JSON Schema for a Gemini Schema: types lower-cased, `nullable` as a "null" type (or a
    null branch of anyOf), nested properties, items and anyOf converted; `propertyOrdering`
    and unknown keywords left out. A schema that already is JSON Schema (lower-case types)
    comes through unchanged in meaning."""
    if not isinstance(schema, dict):
        return {}
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, str) and kind:
        out["type"] = kind.lower()
    elif isinstance(kind, list):
        out["type"] = [str(k).lower() for k in kind]
    for key in _SAME:
        if key in schema:
            out[key] = schema[key]
    if out.get("format") == "enum":
        del out["format"]  # Gemini's marker for a string enum; JSON Schema has `enum` alone
    properties = schema.get("properties")
    if isinstance(properties, dict):
        out["properties"] = {name: json_schema_of(value) for name, value in properties.items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = json_schema_of(schema["items"])
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        out["anyOf"] = [json_schema_of(branch) for branch in branches]
    if schema.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        elif "anyOf" in out:
            out["anyOf"].append({"type": "null"})
    return out

"""Gemini API wire details (generativelanguage.googleapis.com v1beta, camelCase JSON) that the
Chat <-> Gemini translators share: finish reasons, usage, error bodies, function calls with
their thought signatures, and the OpenAPI subset Gemini accepts as function parameters.

References: https://ai.google.dev/api/generate-content (Candidate, FinishReason,
UsageMetadata), https://ai.google.dev/api/caching#Schema and
https://ai.google.dev/gemini-api/docs/thought-signatures.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

#: Finish reasons that mean the answer was cut by a filter rather than by the model.
CONTENT_FILTER_REASONS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)

#: Google's documented placeholder for a function call whose thought signature is unknown
#: (history from a client that did not keep it). Gemini 3 answers 400 when the first call of
#: a model step carries no signature; older models ignore the field.
SKIP_SIGNATURE = "skip_thought_signature_validator"


def finish_reason(reason: str | None, *, tool_calls: bool) -> str:
    """Chat's finish_reason for a candidate's finishReason. Gemini says STOP after function
    calls too; Chat clients loop on "tool_calls", so a STOP with calls becomes that."""
    if reason == "MAX_TOKENS":
        return "length"
    if reason in CONTENT_FILTER_REASONS:
        return "content_filter"
    return "tool_calls" if tool_calls else "stop"


def chat_usage(metadata: dict[str, Any]) -> dict[str, Any]:
    """Chat usage from usageMetadata. Gemini counts thinking apart from the answer
    (thoughtsTokenCount) and bills it as output, so it joins completion_tokens as OpenAI's
    reasoning tokens do; tokens of built-in tool prompts are input, so they join
    prompt_tokens, and prompt + completion then equals Gemini's totalTokenCount."""
    prompt = _count(metadata, "promptTokenCount") + _count(metadata, "toolUsePromptTokenCount")
    thoughts = _count(metadata, "thoughtsTokenCount")
    completion = _count(metadata, "candidatesTokenCount") + thoughts
    total = metadata.get("totalTokenCount")
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total if type(total) is int else prompt + completion,
        "prompt_tokens_details": {"cached_tokens": _count(metadata, "cachedContentTokenCount")},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    }


def _count(metadata: dict[str, Any], key: str) -> int:
    value = metadata.get(key)
    return value if type(value) is int else 0


def error_message(parsed: Any) -> str | None:
    """The message of a parsed Gemini error body, `{"error": {"code", "message", "status"}}`.
    Streamed requests that fail may answer with that object wrapped in a list."""
    if isinstance(parsed, list) and parsed:
        parsed = parsed[0]
    if not isinstance(parsed, dict):
        return None
    error = parsed.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return None


def upstream_error_message(body: bytes) -> str | None:
    try:
        return error_message(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None


def new_completion_id(response_id: Any) -> str:
    """Gemini's responseId names the answer; reusing it lets logs on both sides meet."""
    if isinstance(response_id, str) and response_id:
        return "chatcmpl-" + response_id
    return "chatcmpl-" + uuid.uuid4().hex


def visible_text(part: dict[str, Any]) -> str | None:
    """A part's answer text; thought summaries (`"thought": true`) are not the answer."""
    text = part.get("text")
    if isinstance(text, str) and text and part.get("thought") is not True:
        return text
    return None


def chat_tool_call(part: dict[str, Any]) -> dict[str, Any] | None:
    """The Chat tool call of a functionCall part, or None for other parts. Gemini has no
    call ids, so one is made up. A thought signature rides in
    `extra_content.google.thought_signature`, where Google's own OpenAI-compatible endpoint
    puts it, so clients that echo the assistant message hand it back."""
    call = part.get("functionCall")
    if not isinstance(call, dict):
        return None
    args = call.get("args")
    tool_call: dict[str, Any] = {
        "id": "call_" + uuid.uuid4().hex[:24],
        "type": "function",
        "function": {
            "name": str(call.get("name", "")),
            "arguments": orjson.dumps(args if isinstance(args, dict) else {}).decode(),
        },
    }
    signature = part.get("thoughtSignature")
    if isinstance(signature, str) and signature:
        tool_call["extra_content"] = {"google": {"thought_signature": signature}}
    return tool_call


def tool_call_signature(tool_call: dict[str, Any]) -> str | None:
    """The thought signature a client echoed with a tool call (see chat_tool_call)."""
    extra = tool_call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return signature if isinstance(signature, str) and signature else None


# Function parameters: Gemini's Schema is an OpenAPI 3.0 subset and answers 400 to JSON
# Schema keywords it does not know, so schemas are rebuilt from what it accepts.
_COPIED_KEYS = (
    "title",
    "description",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "propertyOrdering",
)
_FORMATS = {
    "string": frozenset({"enum", "date-time"}),
    "integer": frozenset({"int32", "int64"}),
    "number": frozenset({"float", "double"}),
}
_REF_PREFIXES = ("#/$defs/", "#/definitions/")


def function_parameters(schema: Any) -> dict[str, Any] | None:
    """Gemini `parameters` for a function's JSON Schema, or None when the function takes
    none: Gemini rejects an OBJECT schema with empty properties. Local `$ref`s are inlined
    (a recursive one becomes a plain object), `oneOf` reads as `anyOf`, `const` as a
    one-value enum, `["x", "null"]` types and null branches as `nullable`; keywords Gemini
    lacks (additionalProperties, $schema, strict, default, examples...) are left out."""
    if not isinstance(schema, dict):
        return None
    defs: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        if isinstance(schema.get(key), dict):
            defs.update(schema[key])
    converted = _schema(schema, defs, frozenset())
    if not converted.get("properties"):
        return None
    converted["type"] = "object"
    return converted


def _schema(node: Any, defs: dict[str, Any], resolving: frozenset[str]) -> dict[str, Any]:
    if not isinstance(node, dict):
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = next((ref[len(p) :] for p in _REF_PREFIXES if ref.startswith(p)), None)
        target = defs.get(name) if name is not None else None
        if not isinstance(target, dict) or ref in resolving:
            return _documented({"type": "object"}, node)
        return _documented(_schema(target, defs, resolving | {ref}), node)
    all_of = node.get("allOf")
    if isinstance(all_of, list):
        node = _merged([node, *(_resolved(s, defs) for s in all_of)])

    out: dict[str, Any] = {}
    kind = node.get("type")
    nullable = node.get("nullable") is True
    if isinstance(kind, list):
        nullable = nullable or "null" in kind
        kinds = [k for k in kind if isinstance(k, str) and k != "null"]
        if len(kinds) > 1:
            variants = [_schema({**node, "type": k}, defs, resolving) for k in kinds]
            return {"anyOf": variants, **({"nullable": True} if nullable else {})}
        kind = kinds[0] if kinds else None
    if kind == "null":
        nullable, kind = True, None
    if kind is None and isinstance(node.get("properties"), dict):
        kind = "object"
    if isinstance(kind, str):
        out["type"] = kind
    for key in _COPIED_KEYS:
        if key in node:
            out[key] = node[key]
    if node.get("format") in _FORMATS.get(str(kind), ()):
        out["format"] = node["format"]
    enum = node.get("enum")
    if "const" in node:
        enum = [node["const"]]
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        out["enum"] = enum
    branches = node.get("anyOf", node.get("oneOf"))
    if isinstance(branches, list):
        kept = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        nullable = nullable or len(kept) < len(branches)
        converted = [_schema(b, defs, resolving) for b in kept]
        if len(converted) == 1:
            out = {**converted[0], **out}
        elif converted:
            out["anyOf"] = converted
    if isinstance(node.get("items"), dict):
        out["items"] = _schema(node["items"], defs, resolving)
    properties = node.get("properties")
    if kind == "object" and isinstance(properties, dict) and properties:
        out["properties"] = {k: _schema(v, defs, resolving) for k, v in properties.items()}
        required = node.get("required")
        if isinstance(required, list):
            kept_required = [r for r in required if r in properties]
            if kept_required:
                out["required"] = kept_required
    if nullable:
        out["nullable"] = True
    return out


def _documented(schema: dict[str, Any], ref_node: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` node's own description (allowed beside `$ref` since draft 2019-09) wins."""
    if isinstance(ref_node.get("description"), str):
        return {**schema, "description": ref_node["description"]}
    return schema


def _resolved(node: Any, defs: dict[str, Any]) -> Any:
    ref = node.get("$ref") if isinstance(node, dict) else None
    if isinstance(ref, str):
        for prefix in _REF_PREFIXES:
            if ref.startswith(prefix) and isinstance(defs.get(ref[len(prefix) :]), dict):
                return defs[ref[len(prefix) :]]
    return node


def _merged(nodes: list[Any]) -> dict[str, Any]:
    """allOf as one schema: properties and required united, other keywords first one wins."""
    merged: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                properties.update(value)
            elif key == "required" and isinstance(value, list):
                required.extend(r for r in value if r not in required)
            elif key != "allOf":
                merged.setdefault(key, value)
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = required
    return merged

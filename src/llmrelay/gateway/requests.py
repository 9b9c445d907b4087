"""Checking a client's request body and resolving the model it names.

Only what the gateway itself needs is checked; everything else is the provider's business
and passes through untouched.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.gateway.errors import InvalidRequest, NotFound, PermissionDenied
from llmrelay.snapshot.model import KeySnap, ModelSnap, PolicySnap, Snapshot

#: The model name a request sends for its tenant's `default_model` preference.
DEFAULT_MODEL: Final = "default"


def parse_object(body: bytes) -> dict[str, Any]:
    if not body:
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return payload


def check_chat(payload: dict[str, Any]) -> None:
    _require_model(payload)
    messages = payload.get("messages")
    if messages is None:
        raise InvalidRequest(
            "'messages' is required", param="messages", code="missing_required_parameter"
        )
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    if not all(isinstance(m, dict) for m in messages):
        raise InvalidRequest("each item of 'messages' must be an object", param="messages")
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    n = payload.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise InvalidRequest("'n' must be a positive integer", param="n")
    options = payload.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest("'stream_options' must be an object", param="stream_options")


def check_embeddings(payload: dict[str, Any]) -> None:
    _require_model(payload)
    value = payload.get("input")
    if value is None:
        raise InvalidRequest(
            "'input' is required", param="input", code="missing_required_parameter"
        )
    if not isinstance(value, str | list) or (isinstance(value, list) and not value):
        raise InvalidRequest("'input' must be a string or a non-empty array", param="input")


def check_images(payload: dict[str, Any]) -> None:
    """OpenAI's image generation body: a prompt, one image, returned as base64."""
    _require_model(payload)
    prompt = payload.get("prompt")
    if prompt is None:
        raise InvalidRequest(
            "'prompt' is required", param="prompt", code="missing_required_parameter"
        )
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest("'prompt' must be a non-empty string", param="prompt")
    n = payload.get("n")
    if n is not None and n != 1:
        raise InvalidRequest("'n' must be 1: one image per request", param="n")
    given = payload.get("response_format")
    if given is not None and given != "b64_json":
        raise InvalidRequest(
            "'response_format' must be 'b64_json': images are returned inline",
            param="response_format",
        )
    if payload.get("stream") not in (None, False):
        raise InvalidRequest("streamed image generation is not served", param="stream")
    for name in ("size", "quality", "background", "output_format", "moderation"):
        value = payload.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"'{name}' must be a string", param=name)


def _require_model(payload: dict[str, Any]) -> None:
    model = payload.get("model")
    if model is None:
        raise InvalidRequest(
            "'model' is required", param="model", code="missing_required_parameter"
        )
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' must be a non-empty string", param="model")


def resolve_model(
    snapshot: Snapshot, principal: KeySnap, name: str, *, embedding: bool, image: bool = False
) -> tuple[ModelSnap, str | None]:
    """The virtual model (and pinned provider slug, for `MODEL:PROVIDER`) the key may use.
    `default` is the tenant's default model (its preferences) unless a model has that name;
    the key's allowlist is checked against the model it stands for."""
    pinned = None
    model = snapshot.model(principal.tenant_id, name)
    if model is None:  # the name is not a model: a pin, `default`, or unknown
        model, pinned = _not_a_model(snapshot, principal.tenant_id, name)
    if not principal.allows_model(model.name):
        raise PermissionDenied(
            f"this API key may not use model {model.name!r}",
            code="model_not_allowed",
            param="model",
        )
    if pinned is not None and not any(r.provider.slug == pinned for r in model.routes):
        raise NotFound(
            f"model {model.name!r} has no route to provider {pinned!r}",
            code="model_not_found",
            param="model",
        )
    if model.embedding != embedding:
        kind = "an embedding model" if model.embedding else "not an embedding model"
        raise InvalidRequest(
            f"model {model.name!r} is {kind}", code="wrong_model_kind", param="model"
        )
    if model.image != image:
        kind = (
            "an image model: POST /v1/images/generations" if model.image else "not an image model"
        )
        raise InvalidRequest(
            f"model {model.name!r} is {kind}", code="wrong_model_kind", param="model"
        )
    policy = principal.policy
    if policy is not None:
        check_policy(policy, model, pinned)
    return model, pinned


def _not_a_model(snapshot: Snapshot, tenant_id: str, name: str) -> tuple[ModelSnap, str | None]:
    """`MODEL:PROVIDER`, or `default` (the tenant's default model, when no model has the
    name), else NotFound."""
    if ":" in name:
        base, pinned = name.rsplit(":", 1)
        model = snapshot.model(tenant_id, base)
        if model is not None:
            return model, pinned
    elif name == DEFAULT_MODEL:
        model = snapshot.default_models.get(tenant_id)
        if model is not None:
            return model, None
    raise NotFound(f"model {name!r} does not exist", code="model_not_found", param="model")


def policy_reaches(policy: PolicySnap, model: ModelSnap, pinned: str | None = None) -> bool:
    """Whether the policy leaves the model (the pinned provider's routes, if pinned) any
    route. Disabled routes count: a policy that allows only those meets the usual 503."""
    return any(
        (pinned is None or route.provider.slug == pinned) and policy.allows(route)
        for route in model.routes
    )


def check_policy(policy: PolicySnap, model: ModelSnap, pinned: str | None) -> None:
    """Fail closed: a routing policy that leaves no route of the model asked for (of the
    pinned provider, if pinned) is a 403 naming it, never a wider set of routes."""
    if policy_reaches(policy, model, pinned):
        return
    to = f" to provider {pinned!r}" if pinned is not None else ""
    raise PermissionDenied(
        f"routing policy {policy.name!r} allows no route of model {model.name!r}{to}",
        code="routing_policy_denied",
        param="model",
    )

"""`POST /v1/generate`, llmrelay's own normalised endpoint: its request checked and turned
into a chat request (the internal form, so every provider type serves it), and a chat answer
turned into one generation object, the same shape whatever protocol the provider spoke.

A request:   {"model", "prompt" | "messages", "system"?, "max_tokens"?, "temperature"?,
              "metadata"?, "webhook_url"?}
An answer:   {"id", "object": "generation", "status", "created", "model", "provider",
              "content", "finish_reason", "usage": {"input_tokens", "output_tokens",
              "total_tokens"}, "latency_ms", "metadata", "request_id"}

Unknown fields are refused (400 naming them): a field this endpoint does not carry must not
look as if it took effect.
"""

from __future__ import annotations

import math
from typing import Any, Final

from llmrelay.protocols.errors import InvalidRequest

OBJECT: Final = "generation"
_FIELDS: Final = frozenset(
    {"model", "prompt", "messages", "system", "max_tokens", "temperature", "metadata"}
)
WEBHOOK_FIELD: Final = "webhook_url"
#: OpenAI's limits on `metadata`, kept so one client library's checks fit both.
_METADATA_PAIRS: Final = 16
_METADATA_KEY: Final = 64
_METADATA_VALUE: Final = 512
_URL_MAX: Final = 2048
_ROLES: Final = frozenset({"system", "developer", "user", "assistant"})


def check_generate(payload: dict[str, Any]) -> None:
    """400 naming the field for anything this endpoint cannot take as given."""
    for field in payload:
        if field not in _FIELDS and field != WEBHOOK_FIELD:
            raise InvalidRequest(
                f"unknown field {field!r}: /v1/generate takes model, prompt or messages, "
                "system, max_tokens, temperature, metadata and webhook_url",
                param=field,
                code="unknown_parameter",
            )
    model = payload.get("model")
    if model is None:
        raise InvalidRequest(
            "'model' is required", param="model", code="missing_required_parameter"
        )
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' must be a non-empty string", param="model")
    _check_input(payload)
    system = payload.get("system")
    if system is not None and not isinstance(system, str):
        raise InvalidRequest("'system' must be a string", param="system")
    max_tokens = payload.get("max_tokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise InvalidRequest("'max_tokens' must be a positive integer", param="max_tokens")
    temperature = payload.get("temperature")
    if temperature is not None and (
        not isinstance(temperature, int | float)
        or isinstance(temperature, bool)
        or not math.isfinite(temperature)
        or not 0 <= temperature <= 2
    ):
        raise InvalidRequest("'temperature' must be a number from 0 to 2", param="temperature")
    _check_metadata(payload.get("metadata"))
    url = payload.get(WEBHOOK_FIELD)
    if url is not None and (not isinstance(url, str) or not url or len(url) > _URL_MAX):
        raise InvalidRequest(
            f"'webhook_url' must be a URL of at most {_URL_MAX} characters", param=WEBHOOK_FIELD
        )


def _check_input(payload: dict[str, Any]) -> None:
    prompt, messages = payload.get("prompt"), payload.get("messages")
    if (prompt is None) == (messages is None):
        raise InvalidRequest(
            "send either 'prompt' (a string) or 'messages' (chat messages), not both",
            param="prompt" if prompt is not None else "messages",
            code="missing_required_parameter" if prompt is None else "invalid_request",
        )
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt:
            raise InvalidRequest("'prompt' must be a non-empty string", param="prompt")
        return
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"'{where}' must be an object", param=where)
        if message.get("role") not in _ROLES:
            raise InvalidRequest(
                f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}",
                param=f"{where}.role",
            )
        content = message.get("content")
        if not isinstance(content, str | list):
            raise InvalidRequest(
                f"'{where}.content' must be a string or an array of parts",
                param=f"{where}.content",
            )


def _check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise InvalidRequest("'metadata' must be an object of strings", param="metadata")
    if len(metadata) > _METADATA_PAIRS:
        raise InvalidRequest(
            f"'metadata' may hold at most {_METADATA_PAIRS} pairs", param="metadata"
        )
    for key, value in metadata.items():
        if len(key) > _METADATA_KEY or not isinstance(value, str) or len(value) > _METADATA_VALUE:
            raise InvalidRequest(
                f"'metadata' keys are at most {_METADATA_KEY} characters and values strings "
                f"of at most {_METADATA_VALUE}: {key[:_METADATA_KEY]!r} is not",
                param=f"metadata.{key[:_METADATA_KEY]}",
            )


def chat_request(payload: dict[str, Any]) -> dict[str, Any]:
    """The checked request as Chat Completions (never streamed)."""
    messages: list[dict[str, Any]] = []
    system = payload.get("system")
    if system:
        messages.append({"role": "system", "content": system})
    prompt = payload.get("prompt")
    if prompt is not None:
        messages.append({"role": "user", "content": prompt})
    else:
        messages.extend(payload["messages"])
    chat: dict[str, Any] = {"model": payload["model"], "messages": messages}
    for field in ("max_tokens", "temperature"):
        if payload.get(field) is not None:
            chat[field] = payload[field]
    return chat


def completion_parts(answer: dict[str, Any]) -> tuple[str, str | None]:
    """(content, finish reason) of a chat completion's first choice; a refusal reads as
    its text, no text as ""."""
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else {}
    message = first.get("message") if isinstance(first, dict) else None
    content: Any = None
    if isinstance(message, dict):
        content = message.get("content")
        if content is None:
            content = message.get("refusal")
    if isinstance(content, list):  # parts, from a server that sends them
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    finish = first.get("finish_reason") if isinstance(first, dict) else None
    return (content if isinstance(content, str) else ""), (
        finish if isinstance(finish, str) else None
    )


def generation_body(
    *,
    generation_id: str,
    request_id: str,
    created: int,
    model: str,
    provider: str | None,
    content: str,
    finish_reason: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    latency_ms: float,
    metadata: Any,
) -> dict[str, Any]:
    """A finished generation in the one shape every provider's answer takes."""
    total = None if input_tokens is None or output_tokens is None else input_tokens + output_tokens
    return {
        "id": generation_id,
        "object": OBJECT,
        "status": "completed",
        "created": created,
        "model": model,
        "provider": provider,
        "content": content,
        "finish_reason": finish_reason,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": total,
        },
        "latency_ms": round(latency_ms),
        "metadata": metadata or {},
        "request_id": request_id,
    }

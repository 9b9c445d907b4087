"""Google's shapes for what the gateway itself answers to Gemini clients: error bodies and
the model resources of `GET /v1beta/models`.

Errors are `{"error": {"code": HTTP status, "message", "status": canonical name, "details":
[...]}}` as Google's APIs write them (https://ai.google.dev/gemini-api/docs/troubleshooting,
google.rpc.Status): the gateway's own code and the request id ride in a
`google.rpc.ErrorInfo` detail (`reason`, `domain: "llmrelay"`, `metadata.request_id`), and a
retry hint in a `google.rpc.RetryInfo` detail (`retryDelay: "Ns"`), where Google's clients
(the genai SDKs, Gemini CLI) look for it.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

#: HTTP status -> Google's canonical status name (google.rpc.Code), for the statuses the
#: gateway answers; one Google would not use keeps its HTTP meaning under the nearest name.
STATUS_NAMES: Final = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    402: "FAILED_PRECONDITION",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_ERROR_INFO: Final = "type.googleapis.com/google.rpc.ErrorInfo"
_RETRY_INFO: Final = "type.googleapis.com/google.rpc.RetryInfo"


def status_name(status: int) -> str:
    found = STATUS_NAMES.get(status)
    if found is not None:
        return found
    return "INVALID_ARGUMENT" if 400 <= status < 500 else "INTERNAL"


def error_payload(
    status: int,
    message: str,
    *,
    reason: str | None = None,
    request_id: str | None = None,
    retry_after: str | None = None,
) -> dict[str, Any]:
    details: list[dict[str, Any]] = []
    if reason is not None or request_id is not None:
        info: dict[str, Any] = {"@type": _ERROR_INFO, "reason": reason or "", "domain": "llmrelay"}
        if request_id is not None:
            info["metadata"] = {"request_id": request_id}
        details.append(info)
    if retry_after is not None:
        details.append({"@type": _RETRY_INFO, "retryDelay": f"{retry_after}s"})
    error: dict[str, Any] = {"code": status, "message": message, "status": status_name(status)}
    if details:
        error["details"] = details
    return {"error": error}


def error_body(
    status: int,
    message: str,
    *,
    reason: str | None = None,
    request_id: str | None = None,
    retry_after: str | None = None,
) -> bytes:
    return orjson.dumps(
        error_payload(
            status, message, reason=reason, request_id=request_id, retry_after=retry_after
        )
    )


def is_google_error(body: Any) -> bool:
    """Whether a parsed body is already a Google error (a Gemini provider's own answer)."""
    if isinstance(body, list) and body:
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and "message" in error and "code" in error


def model_resource(
    name: str, *, embedding: bool, input_limit: int | None, created: int
) -> dict[str, Any]:
    """One virtual model as Gemini's Model resource (`models/NAME`)."""
    methods = (
        ["embedContent", "batchEmbedContents"]
        if embedding
        else ["generateContent", "streamGenerateContent", "countTokens"]
    )
    resource: dict[str, Any] = {
        "name": f"models/{name}",
        "baseModelId": name,
        "version": str(created),
        "displayName": name,
        "description": "A virtual model served by llmrelay.",
    }
    if input_limit is not None:
        resource["inputTokenLimit"] = input_limit
    resource["supportedGenerationMethods"] = methods
    return resource

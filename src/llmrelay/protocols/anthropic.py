"""Anthropic Messages wire format: stop reasons, error bodies and stream events.

Plain strings and dicts, so the translators and the gateway can share one vocabulary without
this module knowing the gateway's exception tree.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

#: Anthropic `stop_reason` -> Chat `finish_reason`. `pause_turn` only happens with server
#: tools (which a Chat client cannot have asked for): the turn simply ended for the client.
FINISH_REASON_BY_STOP_REASON: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

#: Chat `finish_reason` -> Anthropic `stop_reason` (`function_call` is the legacy name of a
#: tool call). Chat does not say whether a stop sequence matched, so `stop` is `end_turn`.
STOP_REASON_BY_FINISH_REASON: Final[dict[str, str]] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

#: The documented status of each error type (https://docs.claude.com/en/api/errors).
STATUS_BY_ERROR_TYPE: Final[dict[str, int]] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_ERROR_TYPE_BY_STATUS: Final[dict[int, str]] = {
    status: error_type for error_type, status in STATUS_BY_ERROR_TYPE.items()
}
# 503 is how most proxies say "overloaded"; Anthropic's SDKs retry overloaded_error.
_ERROR_TYPE_BY_STATUS[503] = "overloaded_error"


def finish_reason_for(stop_reason: str | None) -> str:
    """Unknown or missing reasons read as a normal stop: the answer is complete as far as
    the client can tell, and new Anthropic reasons must not break old clients."""
    if stop_reason is None:
        return "stop"
    return FINISH_REASON_BY_STOP_REASON.get(stop_reason, "stop")


def stop_reason_for(finish_reason: str | None) -> str:
    if finish_reason is None:
        return "end_turn"
    return STOP_REASON_BY_FINISH_REASON.get(finish_reason, "end_turn")


def error_type_for_status(status: int) -> str:
    """The docs use invalid_request_error for any 4XX they do not list; any other 5XX is an
    api_error."""
    error_type = _ERROR_TYPE_BY_STATUS.get(status)
    if error_type is not None:
        return error_type
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def status_for_error_type(error_type: str) -> int:
    """Error types may grow (the docs say so): an unknown one is treated as a server error."""
    return STATUS_BY_ERROR_TYPE.get(error_type, 500)


def error_payload(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def error_body(error_type: str, message: str, *, request_id: str | None = None) -> bytes:
    """Anthropic puts `request_id` beside `error`; its SDKs read only `error`."""
    payload = error_payload(error_type, message)
    if request_id is not None:
        payload["request_id"] = request_id
    return orjson.dumps(payload)


def sse_event(name: str, data: dict[str, Any]) -> bytes:
    """Anthropic names every event and repeats the name as the data's `type`; the SDKs
    dispatch on the name, so both must be present."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(error_type: str, message: str) -> bytes:
    """An error after the 200 has been sent (the SDKs raise it from the stream)."""
    return sse_event("error", error_payload(error_type, message))


def upstream_error(body: bytes) -> tuple[str, str] | None:
    """`(type, message)` of an Anthropic-shaped error body, if it is one."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    error = parsed.get("error")
    if not isinstance(error, dict):
        return None
    error_type, message = error.get("type"), error.get("message")
    if isinstance(error_type, str) and isinstance(message, str):
        return error_type, message
    return None

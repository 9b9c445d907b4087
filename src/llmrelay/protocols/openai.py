"""OpenAI wire format: error bodies and the chat stream's events."""

from __future__ import annotations

from typing import Any

import orjson

from llmrelay.gateway.errors import GatewayError

DONE = b"data: [DONE]\n\n"


def error_payload(error: GatewayError) -> dict[str, Any]:
    return {
        "message": error.message,
        "type": error.type,
        "code": error.code,
        "param": error.param,
    }


def error_body(error: GatewayError, request_id: str) -> bytes:
    return orjson.dumps({"error": error_payload(error), "request_id": request_id})


def error_event(error: GatewayError, request_id: str) -> bytes:
    """An in-stream error: the openai SDK raises APIError when a chunk carries `error`."""
    return b"data: " + error_body(error, request_id) + b"\n\n"


def data_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def upstream_error_message(body: bytes) -> str | None:
    """The `error.message` of an OpenAI-shaped error body, if it has one."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return None


class ModelRename:
    """Renames the upstream model to the virtual one in an answer's bytes.

    When the parsed body says `model` is the upstream model and its exact JSON form appears
    once in the bytes, the bytes are patched in place: no re-serialisation, so the answer is
    the provider's bytes with one value changed. Otherwise (unusual spacing, a nested
    "model" key) the parsed body is re-serialised.
    """

    __slots__ = ("_pattern", "_replacement", "_upstream", "_virtual")

    def __init__(self, upstream: str, virtual: str) -> None:
        self._upstream = upstream
        self._virtual = virtual
        self._pattern = b'"model":' + orjson.dumps(upstream)
        self._replacement = b'"model":' + orjson.dumps(virtual)

    def in_bytes(self, raw: bytes) -> bytes:
        """Every `"model":"<upstream>"` in a chunk of stream events. Inside JSON strings a
        quote is always escaped, so the pattern can only match a real `model` key."""
        return raw.replace(self._pattern, self._replacement)

    def apply(self, raw: bytes, parsed: dict[str, Any]) -> bytes:
        if "model" not in parsed:
            return raw
        if parsed["model"] == self._upstream and raw.count(self._pattern) == 1:
            return raw.replace(self._pattern, self._replacement)
        parsed["model"] = self._virtual
        return orjson.dumps(parsed)

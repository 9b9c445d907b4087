"""OpenAI wire format: error bodies and the chat stream's events."""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols.errors import ProtocolError

DONE: Final = b"data: [DONE]\n\n"


def error_payload(error: ProtocolError) -> dict[str, Any]:
    return {
        "message": error.message,
        "type": error.type,
        "code": error.code,
        "param": error.param,
    }


def error_body(error: ProtocolError, request_id: str) -> bytes:
    return orjson.dumps({"error": error_payload(error), "request_id": request_id})


def error_event(error: ProtocolError, request_id: str) -> bytes:
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
    """Names the virtual model in a provider's answers, whatever model the provider reports
    (OpenAI, asked for `gpt-4o-mini`, answers with a dated snapshot such as
    `gpt-4o-mini-2024-07-18`).

    The answer's bytes are patched where the reported model's exact JSON form appears once:
    no re-serialisation, so the answer is the provider's bytes with one value changed.
    Otherwise (unusual spacing, a nested "model" key) the parsed body is re-serialised.
    Inside JSON strings a quote is always escaped, so a `"model":...` pattern can only match
    a real `model` key.
    """

    __slots__ = ("_patterns", "replacement", "reported", "virtual")

    def __init__(self, virtual: str) -> None:
        self.virtual = virtual
        self.replacement = b'"model":' + orjson.dumps(virtual)
        self._patterns: dict[str, bytes] = {}
        #: upstream model asked for -> the pattern of the name its provider reported last
        #: time, so a stream can rename from its first byte (see gateway.relay)
        self.reported: dict[str, bytes] = {}

    def pattern(self, reported: str) -> bytes:
        """`"model":"<reported>"` as compact JSON writes it (cached: a route's provider
        reports one or two names)."""
        pattern = self._patterns.get(reported)
        if pattern is None:
            if len(self._patterns) >= 64:
                self._patterns.clear()
                self.reported.clear()
            pattern = self._patterns[reported] = b'"model":' + orjson.dumps(reported)
        return pattern

    def apply(self, raw: bytes, parsed: dict[str, Any]) -> bytes:
        """A whole (non-streamed) answer with its top-level `model` renamed."""
        if "model" not in parsed:
            return raw
        model = parsed["model"]
        if model == self.virtual:
            return raw
        if type(model) is str:
            pieces = raw.split(self.pattern(model), 2)  # one scan (count, then replace: two)
            if len(pieces) == 2:
                return self.replacement.join(pieces)
        parsed["model"] = self.virtual
        return orjson.dumps(parsed)

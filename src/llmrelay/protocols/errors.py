"""The errors the protocols package raises and renders, so translation stands on its own.

`ProtocolError` is the root of every error a client is answered with: an HTTP status, the
client protocol's error `type`, a stable `code` and the request field it concerns (`param`).
The renderers (openai.error_body, anthropic_models.error_body, gemini_models) take one of
these; the gateway's own tree (gateway/errors.py) grows from it, so one `except` there
catches both. `TranslationError` is what a translator raises when the target protocol
cannot express a request: the gateway maps it to a 400 naming `param` (gateway/executor.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["InvalidRequest", "ProtocolError", "TranslationError"]

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class ProtocolError(Exception):
    status = 500
    type = "api_error"
    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param
        self.headers = headers or _NO_HEADERS


class InvalidRequest(ProtocolError):
    """A request body the protocol's own checks refuse (400 naming the field)."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class TranslationError(ValueError):
    """The request uses something the target protocol cannot express. The client gets a 400
    naming `param` (a field of the client's request), never a silent drop."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

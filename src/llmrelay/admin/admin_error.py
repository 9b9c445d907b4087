"""The admin API's refusal (status, message, type, field), in a module of its own: the
data plane's start uses admin state and the console bootstrap, which raise it, without
importing FastAPI and the admin routers (see app._BuiltOnFirstUse); errors.py renders it."""

from __future__ import annotations

from collections.abc import Mapping


class AdminError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request",
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.field = field
        #: extra response headers (Retry-After on a 429)
        self.headers = headers

"""One error shape for every admin route: `{"error": {"message", "type", "field"}}`, with
the field that failed (a query parameter, a body field) whenever there is one. Validation
errors are 400, not FastAPI's 422: the contract's clients check for 400."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response


class AdminError(Exception):
    def __init__(
        self, status: int, message: str, kind: str = "invalid_request", field: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.field = field


def error_response(
    status: int,
    message: str,
    kind: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {"message": message, "type": kind}
    if field is not None:
        body["field"] = field
    return Response(
        orjson.dumps({"error": body}),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


async def _admin_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AdminError)
    return error_response(exc.status, exc.message, exc.kind, exc.field)


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("query", "body", "path")]
    field = ".".join(location) or None
    message = str(first.get("msg", "invalid request"))
    if field:
        message = f"{field}: {message}"
    return error_response(400, message, "invalid_request", field)


_KINDS = {401: "authentication_error", 403: "permission_error", 404: "not_found"}


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = _KINDS.get(exc.status_code, "invalid_request")
    return error_response(exc.status_code, str(exc.detail), kind, headers=exc.headers)


def install(app: FastAPI) -> None:
    app.add_exception_handler(AdminError, _admin_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)

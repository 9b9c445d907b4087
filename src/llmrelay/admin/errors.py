"""One error shape for every admin route: `{"error": {"message", "type", "field"}}`, with
the field that failed (a query parameter, a body field) whenever there is one. Validation
errors are 400, not FastAPI's 422: the contract's clients check for 400. The OpenAPI document
says the same (ERRORS on every route, no 422): tests/admin/test_openapi_fuzz.py holds the app
to it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from llmrelay.admin.admin_error import AdminError as AdminError  # its home; raised everywhere


class FieldError(BaseModel):
    field: str | None = None
    message: str


class ErrorDetail(BaseModel):
    message: str
    type: str
    #: the query parameter, body field or header that failed, when one did
    field: str | None = None
    #: every failed field, when more than one did (the first is `field` and `message`)
    errors: list[FieldError] | None = None


class ErrorBody(BaseModel):
    """What every admin route answers on an error."""

    error: ErrorDetail


def documented(described: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route or the app: each status, when it is answered, the error body."""
    return {status: {"model": ErrorBody, "description": text} for status, text in described.items()}


#: The errors any admin route may answer, declared once on the app (admin/app.py). A route that
#: may answer another one declares it with `responses=documented({...})`.
ERRORS = documented(
    {
        400: "Invalid input: a query parameter, body field or header breaks a rule (`field`)",
        401: "No credentials, or credentials that are not (or no longer) valid",
        403: "The role does not allow this, the CSRF token is missing, or 2FA is required",
        404: "A row named in the path or query does not exist or belongs to another tenant",
        409: "A name already taken, a row others still use, or a version other than the stored one",
        428: "A change without If-Match (the routes that keep a version need it)",
        503: "The database or the secret key is not open yet",
    }
)


def error_response(
    status: int,
    message: str,
    kind: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    errors: Sequence[tuple[str | None, str]] = (),
) -> Response:
    body: dict[str, Any] = {"message": message, "type": kind}
    if field is not None:
        body["field"] = field
    if len(errors) > 1:
        body["errors"] = [{"field": f, "message": m} for f, m in errors]
    return Response(
        orjson.dumps({"error": body}),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


async def _admin_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AdminError)
    return error_response(exc.status, exc.message, exc.kind, exc.field, exc.headers)


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    found: list[tuple[str | None, str]] = []
    for error in exc.errors() or ({},):
        location = [
            str(part) for part in error.get("loc", ()) if part not in ("query", "body", "path")
        ]
        field = ".".join(location) or None
        message = str(error.get("msg", "invalid request"))
        found.append((field, f"{field}: {message}" if field else message))
    field, message = found[0]
    return error_response(400, message, "invalid_request", field, errors=found)


_KINDS = {401: "authentication_error", 403: "permission_error", 404: "not_found"}


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = _KINDS.get(exc.status_code, "invalid_request")
    return error_response(exc.status_code, str(exc.detail), kind, headers=exc.headers)


#: PostgreSQL's refusals of text it cannot store: a NUL character in text (22021) or in JSON
#: (22P05). SQLite stores both, so only PostgreSQL ever raises them.
_UNSTORABLE_TEXT = {"22021", "22P05"}


async def _database_error(_request: Request, exc: Exception) -> Response:
    """A NUL character in a name, email or id is the client's mistake (400), not a 500;
    any other database error stays a server error."""
    assert isinstance(exc, DBAPIError)
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    if code in _UNSTORABLE_TEXT:
        return error_response(
            400, "text must not contain NUL (\\u0000) characters", "invalid_request"
        )
    raise exc


async def _server_error(_request: Request, _exc: Exception) -> Response:
    """Any other failure: a 500 in this API's shape. (Starlette still re-raises it after
    this answer; the ingress logs it and keeps the connection: gateway/ingress.py.)"""
    return error_response(500, "internal error", "server_error")


def _without_422(app: FastAPI) -> None:
    """FastAPI documents a 422 with its own body on every route with parameters; this app
    answers those errors as 400 in its own shape (ERRORS), so the document says so."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        spec = generate()
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        schemas = spec.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def install(app: FastAPI) -> None:
    """The error handlers, and the error answers in the OpenAPI document (call after the
    routers are included)."""
    _without_422(app)
    app.add_exception_handler(AdminError, _admin_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(Exception, _server_error)

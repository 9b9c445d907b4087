"""The errors a service raises, with the field that failed. Plain exceptions (no FastAPI), so
`llmrelay apply` can call the same services without the web stack; admin/errors.py turns
them into the admin API's error body."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from llmrelay.config.loader import Problem, format_path


class ServiceError(Exception):
    status = 400
    kind = "invalid_request"

    def __init__(
        self,
        message: str,
        field: str | None = None,
        errors: list[tuple[str | None, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        #: Every failed field when the input broke more than one rule (the first is
        #: `field`/`message`): a form shows each next to its input.
        self.errors = errors or []


class Invalid(ServiceError):
    """The input breaks a rule (the same rules the YAML has)."""


class AddressRefused(Invalid):
    """A URL whose host the outbound address policy refuses (outbound/policy.py)."""

    kind = "address_refused"


class NotFound(ServiceError):
    status = 404
    kind = "not_found"


class Conflict(ServiceError):
    """A duplicate name, or a row other rows still depend on."""

    status = 409
    kind = "conflict"


class Stale(ServiceError):
    """The row changed since the caller read it (its version moved)."""

    status = 409
    kind = "conflict"

    def __init__(self, message: str = "the resource changed since you read it; read it again"):
        super().__init__(message, "If-Match")


class PreconditionRequired(ServiceError):
    """A change without If-Match: the caller must say which version it read."""

    status = 428
    kind = "precondition_required"

    def __init__(self) -> None:
        super().__init__("If-Match is required: send the ETag of the version you read", "If-Match")


def _strip(path: str, prefix: str) -> str:
    if prefix and path.startswith(prefix):
        return path[len(prefix) :].lstrip(".")
    return path


def _one(error: Any, prefix: str) -> tuple[str | None, str]:
    field = _strip(format_path(error["loc"]), prefix) or None
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    elif message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return field, f"{field}: {message}" if field else message


def from_validation(exc: ValidationError, prefix: str = "") -> Invalid:
    """A Pydantic validation's errors as the config loader words them: the first as the
    error, all of them in `errors`."""
    found = [_one(error, prefix) for error in exc.errors()]
    if not found:
        return Invalid(str(exc))
    field, message = found[0]
    return Invalid(message, field, found if len(found) > 1 else None)


def from_problems(problems: Iterable[Problem], prefix: str = "") -> Invalid | None:
    """The problems the config's reference checks found (paths relative to `prefix`, for
    example `projects[0]`): the first as the error, all in `errors`; None when none."""
    found: list[tuple[str | None, str]] = []
    for problem in problems:
        field = _strip(problem.path, prefix) or None
        found.append((field, f"{field}: {problem.message}" if field else problem.message))
    if not found:
        return None
    field, message = found[0]
    return Invalid(message, field, found if len(found) > 1 else None)

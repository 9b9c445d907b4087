"""Query parameters and body field rules several routers share."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from fastapi import Query
from pydantic import BeforeValidator

#: Text a person reads back (a tenant's or a user's name): no control characters. NUL would
#: be stored by SQLite and refused by PostgreSQL (one rule for both: refused, 400).
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
#: An email address: one @, no whitespace or control characters.
EMAIL = r"^[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f]+$"

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _not_a_number(value: object) -> object:
    """Pydantic would read a bare number as Unix time; the API takes (and documents) ISO 8601
    only, so `since=0` is refused rather than read as 1970."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        raise ValueError("an ISO 8601 date and time (2026-01-31T12:00:00Z), not a number")
    return value


#: A moment in a query string: ISO 8601, without a zone UTC.
When = Annotated[
    datetime | None,
    Query(description="ISO 8601; without a zone, UTC"),
    BeforeValidator(_not_a_number),
]

"""Optimistic concurrency and the commit of identity and tenant changes (rows the data plane's
snapshot does not read, so no config generation moves: see kit/http.commit_change for those).

A change names the version it read, as `If-Match: "<version>"` (the ETag a read showed) or as
a `version` field in the body: none is 428, another version than the stored one is 409."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from llmrelay.admin.kit.http import check_if_match
from llmrelay.admin.kit.problems import Conflict, PreconditionRequired, Stale


def expect_version(request: Request, body_version: int | None, current: int) -> None:
    if request.headers.get("if-match") is not None:
        check_if_match(request, current)
        return
    if body_version is None:
        raise PreconditionRequired()
    if body_version != current:
        raise Stale(f"the resource is at version {current}; read it again")


async def commit(session: AsyncSession) -> None:
    """Commit; a concurrent writer that got there first is a 409, never a 500."""
    try:
        await session.commit()
    except StaleDataError:
        raise Stale() from None
    except IntegrityError as exc:
        raise Conflict(f"conflicts with a concurrent change: {exc.orig}") from None

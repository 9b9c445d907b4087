"""The flow a resource handler runs once it has loaded its row and the actor may change it:
check If-Match, show the row as it was, make the change, note it in the audit log, commit it
(bumping and announcing the config generation), and answer with the new ETag. The routes
keep their own signatures (OpenAPI reads them); these run what follows the load.

`action` is the audit log's "<target type>.<verb>" (for example "project.update"); the target
type is its first part. `show` renders the row as the route answers it (and as the audit log
records it: `fields`), plain or async; `apply` is the service call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from fastapi import Request, Response
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.kit.http import check_if_match, commit_change, etag, fields

Out = TypeVar("Out", bound=BaseModel)


class Versioned(Protocol):
    """A row with an id and the version its ETag names."""

    @property
    def id(self) -> str: ...

    @property
    def version(self) -> int: ...


#: How a handler renders its row: a plain function or a coroutine one.
Show = Callable[[], Out | Awaitable[Out]]


async def _shown(show: Show[Out]) -> Out:
    shown = show()
    if isinstance(shown, BaseModel):
        return shown
    return await shown


async def _record(
    request: Request,
    session: AsyncSession,
    row: Versioned,
    action: str,
    tenant_id: str | None,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    """Note the change in the audit log, then commit it and announce the new generation."""
    target_type = action.partition(".")[0]
    audit.note(request, action, target_type, row.id, before, after, tenant_id)
    await commit_change(request, session)


async def created(
    request: Request,
    response: Response,
    session: AsyncSession,
    row: Versioned,
    action: str,
    tenant_id: str | None,
    out: Out,
) -> Out:
    """A new row the service made, answered as `out`: audit, commit, ETag."""
    await _record(request, session, row, action, tenant_id, None, fields(out))
    etag(response, row.version)
    return out


async def updated(
    request: Request,
    response: Response,
    session: AsyncSession,
    row: Versioned,
    action: str,
    tenant_id: str | None,
    *,
    show: Show[Out],
    apply: Callable[[], Awaitable[object]],
) -> Out:
    """Change the row (If-Match required), audited with its fields before and after."""
    check_if_match(request, row.version)
    before = fields(await _shown(show))
    await apply()
    out = await _shown(show)
    await _record(request, session, row, action, tenant_id, before, fields(out))
    etag(response, row.version)
    return out


async def deleted(
    request: Request,
    session: AsyncSession,
    row: Versioned,
    action: str,
    tenant_id: str | None,
    *,
    show: Show[BaseModel],
    apply: Callable[[], Awaitable[object]],
) -> Response:
    """Delete the row (If-Match required), audited with its fields before; a 204."""
    check_if_match(request, row.version)
    before = fields(await _shown(show))
    await apply()
    await _record(request, session, row, action, tenant_id, before, None)
    return Response(status_code=204)

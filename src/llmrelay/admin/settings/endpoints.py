"""/api/admin/settings/routing: the gateway-wide breaker settings and routing policy binding
(the YAML's `routing` section without `policies`). Readable with policies:read; only the
platform admin changes it (it applies to every tenant). HTTP only; rules in service.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.errors import AdminError
from llmrelay.admin.kit.http import Session, commit_change
from llmrelay.admin.kit.problems import PreconditionRequired, Stale
from llmrelay.admin.settings import service

router = APIRouter(tags=["settings"])
Reader = Annotated[Actor, Depends(require("policies:read"))]
Writer = Annotated[Actor, Depends(require("policies:write"))]


def _etag(response: Response, value: dict[str, Any] | None) -> None:
    response.headers["ETag"] = f'"{service.tag(value)}"'


@router.get("/settings/routing")
async def get_routing(response: Response, session: Session, _actor: Reader) -> dict[str, Any]:
    """`{"breaker": {...}, "policy": name}` (no `policy`: no global binding)."""
    _etag(response, await service.stored(session))
    return await service.current_config(session)


@router.put("/settings/routing")
async def put_routing(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    body: Annotated[dict[str, Any], Body(description='{"breaker": {...}, "policy": name}')],
) -> dict[str, Any]:
    """Replace the setting whole; needs If-Match (the ETag of GET)."""
    if not actor.platform_admin:
        raise AdminError(
            403, "only the platform admin changes gateway-wide settings", "permission_error"
        )
    before_value = await service.stored(session)
    sent = request.headers.get("if-match")
    if sent is None:
        raise PreconditionRequired()
    if sent.strip() != "*" and sent.strip().strip('"') != service.tag(before_value):
        raise Stale()
    before = await service.current_config(session)
    if await service.replace_routing(session, body):
        after = await service.current_config(session)
        audit.note(request, "settings.routing", "setting", service.ROUTING, before, after, None)
        await commit_change(request, session)
    _etag(response, await service.stored(session))
    return await service.current_config(session)

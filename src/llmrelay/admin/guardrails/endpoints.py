"""/api/admin/guardrails and /api/admin/settings/guardrails. HTTP only; the rules are in
service.py. Binding a policy to a project or key is a field of that project or key
(`guardrails: [names]`), which also needs guardrails:write."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.errors import AdminError
from llmrelay.admin.guardrails import hits, repository, service
from llmrelay.admin.guardrails.schemas import (
    DryRun,
    DryRunOut,
    GuardrailOut,
    GuardrailPage,
    HitPage,
    guardrail_out,
    hit_out,
)
from llmrelay.admin.kit import handlers
from llmrelay.admin.kit.http import (
    Changes,
    Cursor,
    Limit,
    Session,
    commit_change,
    etag,
    tenant_for_create,
)
from llmrelay.admin.kit.params import When
from llmrelay.admin.kit.problems import NotFound, PreconditionRequired, Stale
from llmrelay.admin.kit.scope import visible
from llmrelay.admin.settings.service import tag
from llmrelay.store.models_guardrails import GUARDRAILS_SETTING, GuardrailHit, GuardrailPolicy

router = APIRouter(tags=["guardrails"])
Reader = Annotated[Actor, Depends(require("guardrails:read"))]
Writer = Annotated[Actor, Depends(require("guardrails:write"))]
Id = Annotated[str | None, Query(min_length=1, max_length=64)]


async def load(
    session: AsyncSession, actor: Actor, permission: str, guardrail_id: str
) -> GuardrailPolicy:
    row = await repository.get(session, guardrail_id)
    if row is None:
        raise NotFound(f"no guardrail policy {guardrail_id!r}")
    actor.ensure(permission, row.tenant_id)
    return row


@router.get("/guardrails")
async def list_guardrails(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    tenant_id: str | None = None,
) -> GuardrailPage:
    rows, next_cursor = await repository.list_page(
        session,
        where=visible(actor, "guardrails:read", GuardrailPolicy.tenant_id),
        tenant_id=tenant_id,
        limit=limit,
        cursor=cursor,
    )
    return GuardrailPage(data=[guardrail_out(r) for r in rows], next_cursor=next_cursor)


@router.post("/guardrails", status_code=201)
async def create_guardrail(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    body: Annotated[dict[str, Any], Body(description="a guardrails.policies[] entry")],
    tenant_id: str | None = None,
) -> GuardrailOut:
    config = service.parse(body)
    tenant = await tenant_for_create(session, actor, "guardrails:write", tenant_id)
    row = await service.create_policy(session, tenant, config)
    out = guardrail_out(row)
    return await handlers.created(request, response, session, row, "guardrail.create", tenant, out)


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


@router.get("/guardrails/hits")
async def list_hits(
    session: Session,
    actor: Reader,
    project_id: Id = None,
    key_id: Id = None,
    policy_id: Id = None,
    request_id: Id = None,
    detector: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    action: Literal["audit", "mask", "block"] | None = None,
    location: Literal["request", "response"] | None = None,
    since: When = None,
    until: When = None,
    limit: Limit = 50,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> HitPage:
    """Guardrail hits, newest first: where (field), which rule and detector, how many
    matches and how many characters, never the matched text. Each caller sees its
    tenants' hits (a member limited to some projects, those projects')."""
    filters = hits.HitFilter(
        project_id, key_id, policy_id, request_id, detector, action, location,
        _aware(since), _aware(until),
    )  # fmt: skip
    where = visible(actor, "guardrails:read", GuardrailHit.tenant_id, GuardrailHit.project_id)
    rows, next_cursor = await hits.page(session, filters, where, limit, cursor)
    return HitPage(data=[hit_out(r) for r in rows], next_cursor=next_cursor)


@router.get("/guardrails/{guardrail_id}")
async def get_guardrail(
    response: Response, session: Session, actor: Reader, guardrail_id: str
) -> GuardrailOut:
    row = await load(session, actor, "guardrails:read", guardrail_id)
    etag(response, row.version)
    return guardrail_out(row)


@router.patch("/guardrails/{guardrail_id}")
async def update_guardrail(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    guardrail_id: str,
    changes: Changes,
) -> GuardrailOut:
    """A partial change (`rules`, when given, replaces the whole list)."""
    row = await load(session, actor, "guardrails:write", guardrail_id)
    return await handlers.updated(
        request,
        response,
        session,
        row,
        "guardrail.update",
        row.tenant_id,
        show=lambda: guardrail_out(row),
        apply=lambda: service.update_policy(session, row, changes),
    )


@router.delete("/guardrails/{guardrail_id}", status_code=204)
async def delete_guardrail(
    request: Request, session: Session, actor: Writer, guardrail_id: str
) -> Response:
    """Refused (409) while a project, key or the global binding binds it."""
    row = await load(session, actor, "guardrails:write", guardrail_id)
    return await handlers.deleted(
        request,
        session,
        row,
        "guardrail.delete",
        row.tenant_id,
        show=lambda: guardrail_out(row),
        apply=lambda: service.delete_policy(session, row),
    )


@router.post("/guardrails/{guardrail_id}/test")
async def test_guardrail(
    request: Request, session: Session, actor: Reader, guardrail_id: str, body: DryRun
) -> DryRunOut:
    """A dry run: what the policy's rules find in `text` and the text as they would leave
    it. Changes nothing; the text is neither stored nor logged (the audit entry names the
    policy only)."""
    row = await load(session, actor, "guardrails:read", guardrail_id)
    audit.note(request, "guardrail.test", "guardrail", row.id, None, None, row.tenant_id)
    return DryRunOut.model_validate(service.dry_run(row, body.text, body.scope))


# -- the global binding ---------------------------------------------------------------------


async def _stored(session: AsyncSession) -> dict[str, Any]:
    return {"policy_ids": await repository.global_ids(session)}


def _etag(response: Response, value: dict[str, Any]) -> None:
    response.headers["ETag"] = f'"{tag(value)}"'


@router.get("/settings/guardrails")
async def get_global(response: Response, session: Session, _actor: Reader) -> dict[str, Any]:
    """`{"global": [names]}`: the policies in force for every key of every tenant."""
    _etag(response, await _stored(session))
    return await service.global_config(session)


@router.put("/settings/guardrails")
async def put_global(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    body: Annotated[dict[str, Any], Body(description='{"global": [policy names]}')],
) -> dict[str, Any]:
    """Replace the global binding (policies of the default tenant); needs If-Match (the
    ETag of GET). Only the platform admin: it applies to every tenant."""
    if not actor.platform_admin:
        raise AdminError(
            403, "only the platform admin changes gateway-wide settings", "permission_error"
        )
    sent = request.headers.get("if-match")
    if sent is None:
        raise PreconditionRequired()
    if sent.strip() != "*" and sent.strip().strip('"') != tag(await _stored(session)):
        raise Stale()
    before = await service.global_config(session)
    if await service.replace_global(session, body):
        after = await service.global_config(session)
        audit.note(
            request, "settings.guardrails", "setting", GUARDRAILS_SETTING, before, after, None
        )
        await commit_change(request, session)
    _etag(response, await _stored(session))
    return await service.global_config(session)

"""An openai_codex provider's ChatGPT accounts (docs/codex.md), each one of its resources:
GET /providers/{id}/codex (who is signed in, the tokens' expiry, the usage limits;
`?refresh=true` asks the backend's usage endpoint now), the device code sign-in the console
drives (POST .../codex/device, then POST .../codex/device/poll until signed in: it adds the
account, or renews it) and DELETE .../codex (sign out: every account, or `?resource=`).
HTTP and the few rules there are; the sign-in's write is llmrelay/codex_vault.py's, the
token handling providers/codex/'s. No token ever leaves in an answer."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.admin_error import AdminError
from llmrelay.admin.errors import documented
from llmrelay.admin.kit.http import Session, commit_change, state
from llmrelay.admin.providers.endpoints import load
from llmrelay.codex_vault import accounts_of, sign_in, sign_out
from llmrelay.providers.codex import oauth
from llmrelay.providers.codex.accounts import CodexAccounts
from llmrelay.snapshot.builder import provider_snap
from llmrelay.store.models import Provider, ProviderResource
from llmrelay.store.models_codex import CodexAccount

router = APIRouter(tags=["providers"])
#: What the device code routes may answer besides the app's errors.
_ISSUER = documented({502: "The ChatGPT issuer refused the call or could not be reached"})
Reader = Annotated[Actor, Depends(require("providers:read"))]
Writer = Annotated[Actor, Depends(require("providers:write"))]


class CodexAccountOut(BaseModel):
    signed_in: bool
    #: The provider resource the account is (its priority, quotas and health are the
    #: resource's: /providers/{id}/resources).
    resource_id: str | None = None
    resource: str | None = None
    account_id: str | None = None
    email: str | None = None
    plan_type: str | None = None
    access_expires_at: datetime | None = None
    refreshed_at: datetime | None = None
    #: {"primary": {"used_percent", "window_minutes", "resets_at"}, "secondary": {...}}
    limits: dict[str, Any] | None = None
    #: Set while the usage limit is reached: no call is sent to the account before.
    exhausted_until: datetime | None = None
    #: Why `refresh=true` could not read the usage endpoint (the stored limits are shown).
    usage_error: str | None = None


class CodexAccountsOut(CodexAccountOut):
    """The first account (in the order routing tries them) at the top level, as before
    providers had several, and every account in `accounts`."""

    accounts: list[CodexAccountOut] = Field(default_factory=list)


class DeviceStarted(BaseModel):
    device_auth_id: str
    user_code: str
    verification_url: str
    interval_s: int


class DevicePoll(BaseModel):
    device_auth_id: str = Field(min_length=1, max_length=200)
    user_code: str = Field(min_length=1, max_length=50)
    #: The resource the account goes to (made when missing); None: the account's own
    #: resource when it was signed in before, else a new one named after its email.
    resource: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")


class DevicePolled(BaseModel):
    #: "pending" (poll again after the interval) or "signed_in".
    status: str
    account: CodexAccountOut | None = None


def _accounts(request: Request) -> CodexAccounts:
    found = state(request).probes().registry.codex
    if found is None:
        raise AdminError(503, "openai_codex providers are not served here", "unavailable")
    return found


async def _codex_provider(session: Session, actor: Actor, permission: str, pid: str) -> Provider:
    row = await load(session, actor, permission, pid)
    if row.type != "openai_codex":
        raise AdminError(409, f"provider {row.slug!r} is not of type openai_codex", "conflict")
    return row


async def _out(
    session: Session, provider_id: str, problems: dict[str, str] | None = None
) -> CodexAccountsOut:
    rows = await accounts_of(session, provider_id)
    if not rows:
        return CodexAccountsOut(signed_in=False)
    problems = problems or {}
    listed = [_account(row, resource, problems.get(row.id)) for row, resource in rows]
    return CodexAccountsOut(**listed[0].model_dump(), accounts=listed)


def _account(
    row: CodexAccount, resource: ProviderResource | None, problem: str | None
) -> CodexAccountOut:
    return CodexAccountOut(
        signed_in=True,
        resource_id=row.resource_id,
        resource=resource.name if resource is not None else None,
        usage_error=problem,
        account_id=row.account_id,
        email=row.email,
        plan_type=row.plan_type,
        access_expires_at=row.access_expires_at,
        refreshed_at=row.refreshed_at,
        limits=row.limits,
        exhausted_until=row.exhausted_until,
    )


@router.get("/providers/{provider_id}/codex")
async def codex_account(
    request: Request, session: Session, actor: Reader, provider_id: str, refresh: bool = False
) -> CodexAccountsOut:
    """The signed-in accounts and their usage limits (as last seen, or asked now); a provider
    of another type has none."""
    row = await load(session, actor, "providers:read", provider_id)
    problems: dict[str, str] = {}
    signed = await accounts_of(session, row.id) if row.type == "openai_codex" else []
    if refresh and signed:
        accounts = _accounts(request)
        snap = provider_snap(row, state(request).secrets())
        for account, _ in signed:
            try:
                await accounts.fetch_usage(replace(snap, resource_id=account.resource_id))
            except (oauth.OAuthError, LookupError) as failed:
                problems[account.id] = str(failed)
        await accounts.settled()
        session.expire_all()  # the limits were written by another session
    return await _out(session, provider_id, problems)


@router.post("/providers/{provider_id}/codex/device", responses=_ISSUER)
async def codex_device_start(
    request: Request, session: Session, actor: Writer, provider_id: str
) -> DeviceStarted:
    """Start a device code sign-in: show the user the code and the URL."""
    row = await _codex_provider(session, actor, "providers:write", provider_id)
    accounts = _accounts(request)
    try:
        code = await oauth.request_device_code(
            accounts.session(), accounts.issuer, accounts.client_id
        )
    except oauth.OAuthError as failed:
        raise AdminError(502, str(failed), "upstream_error") from None
    audit.note(request, "provider.codex_device", "provider", row.id, None, None, row.tenant_id)
    return DeviceStarted(
        device_auth_id=code.device_auth_id,
        user_code=code.user_code,
        verification_url=code.verification_url,
        interval_s=code.interval_s,
    )


@router.post(
    "/providers/{provider_id}/codex/device/poll",
    responses={**_ISSUER, 202: {"model": DevicePolled, "description": "Not approved yet"}},
)
async def codex_device_poll(
    request: Request,
    response: Response,
    session: Session,
    actor: Writer,
    provider_id: str,
    body: DevicePoll,
) -> DevicePolled:
    """Ask once whether the user approved; signed in (and kept) when they did."""
    row = await _codex_provider(session, actor, "providers:write", provider_id)
    accounts = _accounts(request)
    prober = state(request).probes()
    try:
        tokens = await oauth.poll_device_code(
            accounts.session(),
            accounts.issuer,
            accounts.client_id,
            body.device_auth_id,
            body.user_code,
        )
    except oauth.AuthorizationPending:
        response.status_code = 202
        return DevicePolled(status="pending")
    except oauth.OAuthError as failed:
        raise AdminError(502, str(failed), "upstream_error") from None
    kept, resource = await sign_in(
        session,
        state(request).secrets(),
        row.id,
        tokens,
        issuer=accounts.issuer,
        client_id=accounts.client_id,
        resource=body.resource,
    )
    after = {"account_id": kept.account_id, "email": kept.email, "resource": resource.name}
    audit.note(request, "provider.codex_sign_in", "provider", row.id, None, after, row.tenant_id)
    await commit_change(request, session)  # every replica reads the new account
    accounts.forget(row.id)
    # A probe made before the sign-in found no account and took the provider out of routing:
    # probe again now, so its routes come back at once rather than at the next retry.
    await prober.probe(row.id)
    shown = await _out(session, row.id)
    mine = next((a for a in shown.accounts if a.account_id == kept.account_id), shown)
    return DevicePolled(status="signed_in", account=mine)


@router.delete("/providers/{provider_id}/codex", status_code=204)
async def codex_sign_out(
    request: Request,
    session: Session,
    actor: Writer,
    provider_id: str,
    resource: Annotated[str | None, Query(max_length=320)] = None,
) -> Response:
    """Forget the provider's accounts, or the one `resource` names (a resource name, an
    email or an account id); their tokens are deleted, their resources stay."""
    row = await load(session, actor, "providers:write", provider_id)
    removed = await sign_out(session, row.id, resource)
    if resource is not None and not removed:
        raise AdminError(404, f"no account {resource!r} is signed in here", "not_found")
    before = {"resource": resource} if resource is not None else None
    audit.note(request, "provider.codex_sign_out", "provider", row.id, before, None, row.tenant_id)
    await commit_change(request, session)
    registry = state(request).prober
    if registry is not None and registry.registry.codex is not None:
        registry.registry.codex.forget(row.id)
    return Response(status_code=204)

"""An openai_codex provider's ChatGPT account (docs/codex.md): GET /providers/{id}/codex (who
is signed in, the token's expiry, the usage limits; `?refresh=true` asks the backend's usage
endpoint now), the device code sign-in the console drives (POST .../codex/device, then POST
.../codex/device/poll until signed in) and DELETE .../codex (sign out). HTTP and the few rules
there are; the sign-in's write is llmrelay/codex_vault.py's, the token handling
providers/codex/'s. No token ever leaves in an answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.admin_error import AdminError
from llmrelay.admin.errors import documented
from llmrelay.admin.kit.http import Session, commit_change, state
from llmrelay.admin.providers.endpoints import load
from llmrelay.codex_vault import first_account, sign_in, sign_out
from llmrelay.providers.codex import oauth
from llmrelay.providers.codex.accounts import CodexAccounts
from llmrelay.snapshot.builder import provider_snap
from llmrelay.store.models import Provider

router = APIRouter(tags=["providers"])
#: What the device code routes may answer besides the app's errors.
_ISSUER = documented({502: "The ChatGPT issuer refused the call or could not be reached"})
Reader = Annotated[Actor, Depends(require("providers:read"))]
Writer = Annotated[Actor, Depends(require("providers:write"))]


class CodexAccountOut(BaseModel):
    signed_in: bool
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


class DeviceStarted(BaseModel):
    device_auth_id: str
    user_code: str
    verification_url: str
    interval_s: int


class DevicePoll(BaseModel):
    device_auth_id: str = Field(min_length=1, max_length=200)
    user_code: str = Field(min_length=1, max_length=50)


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


async def _out(session: Session, provider_id: str) -> CodexAccountOut:
    row = await first_account(session, provider_id)
    if row is None:
        return CodexAccountOut(signed_in=False)
    return CodexAccountOut(
        signed_in=True,
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
) -> CodexAccountOut:
    """The signed-in account and its usage limits (as last seen, or asked now); a provider of
    another type has none."""
    row = await load(session, actor, "providers:read", provider_id)
    problem = None
    if refresh and row.type == "openai_codex" and await first_account(session, row.id):
        accounts = _accounts(request)
        try:
            await accounts.fetch_usage(provider_snap(row, state(request).secrets()))
        except (oauth.OAuthError, LookupError) as failed:
            problem = str(failed)
        await accounts.settled()
        session.expire_all()  # the limits were written by another session
    out = await _out(session, provider_id)
    out.usage_error = problem
    return out


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
    kept = await sign_in(
        session,
        state(request).secrets(),
        row.id,
        tokens,
        issuer=accounts.issuer,
        client_id=accounts.client_id,
    )
    after = {"account_id": kept.account_id, "email": kept.email}
    audit.note(request, "provider.codex_sign_in", "provider", row.id, None, after, row.tenant_id)
    await commit_change(request, session)  # every replica reads the new account
    accounts.forget(row.id)
    # A probe made before the sign-in found no account and took the provider out of routing:
    # probe again now, so its routes come back at once rather than at the next retry.
    await prober.probe(row.id)
    return DevicePolled(status="signed_in", account=await _out(session, row.id))


@router.delete("/providers/{provider_id}/codex", status_code=204)
async def codex_sign_out(
    request: Request, session: Session, actor: Writer, provider_id: str
) -> Response:
    """Forget the provider's account (its tokens are deleted)."""
    row = await load(session, actor, "providers:write", provider_id)
    await sign_out(session, row.id)
    audit.note(request, "provider.codex_sign_out", "provider", row.id, None, None, row.tenant_id)
    await commit_change(request, session)
    registry = state(request).prober
    if registry is not None and registry.registry.codex is not None:
        registry.registry.codex.forget(row.id)
    return Response(status_code=204)

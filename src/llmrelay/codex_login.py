"""`llmrelay codex login|status|logout`: signing a ChatGPT account in for an `openai_codex`
provider from the command line, straight into the database (tokens sealed as provider
credentials are). Running gateways take the new account on its next use. A provider takes
several accounts, each one of its resources: a sign-in adds its account (or renews it, when
that ChatGPT account was signed in before) and leaves the others; `--resource NAME` puts it
on the resource of that name.

Two flows (providers/codex/oauth.py):
- browser (PKCE, the default): a listener on loopback receives the issuer's redirect
  (`http://localhost:PORT/auth/callback`; the Codex client accepts port 1455). The URL to open
  is printed (and opened, unless --no-browser); on a remote machine forward the port first
  (`ssh -L 1455:localhost:1455 ...`) or use the device code.
- device code (`--device`): a code to type at the issuer's page, from any device.
"""

from __future__ import annotations

import asyncio
import secrets
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.codex_vault import accounts_of, sign_in, sign_out
from llmrelay.providers.codex import oauth
from llmrelay.providers.codex.oauth import OAuthError, Tokens
from llmrelay.settings import Settings
from llmrelay.store.bootstrap import bump_generation
from llmrelay.store.crypto import sealer_for
from llmrelay.store.db import create_engine, session_factory
from llmrelay.store.models import Provider, ProviderResource, Tenant
from llmrelay.store.models_codex import CodexAccount

#: How long a sign-in may take before the command gives up (the issuer's codes last 15 min).
LOGIN_TIMEOUT_S = 15 * 60.0


class LoginFailed(RuntimeError):
    """Said to the user as it is, then the command exits non-zero."""


@dataclass(frozen=True, slots=True)
class Target:
    settings: Settings
    provider: str
    tenant: str
    issuer: str
    #: The resource a sign-in goes to, or a sign-out removes (None: the account's own, or
    #: every account).
    resource: str | None = None


async def _provider(session: AsyncSession, target: Target) -> Provider:
    found = await session.execute(
        select(Provider)
        .join(Tenant, Tenant.id == Provider.tenant_id)
        .where(Tenant.slug == target.tenant, Provider.slug == target.provider)
    )
    row = found.scalar_one_or_none()
    if row is None:
        raise LoginFailed(f"no provider {target.provider!r} in tenant {target.tenant!r}")
    if row.type != "openai_codex":
        raise LoginFailed(f"provider {target.provider!r} is of type {row.type}, not openai_codex")
    return row


async def _keep(target: Target, tokens: Tokens) -> str:
    settings = target.settings
    engine = create_engine(settings.database_url)
    try:
        async with session_factory(engine)() as session, session.begin():
            provider = await _provider(session, target)
            row, resource = await sign_in(
                session,
                sealer_for(settings),
                provider.id,
                tokens,
                issuer=target.issuer,
                client_id=settings.codex_client_id,
                resource=target.resource,
            )
            await bump_generation(session)  # running gateways read the new account
            who = f"{row.email or row.account_id} ({row.plan_type or 'unknown plan'})"
            return f"{who} as resource {resource.name!r}"
    finally:
        await engine.dispose()


async def check_provider(target: Target) -> None:
    """Fail before any sign-in when the provider is not there (nothing would keep it)."""
    engine = create_engine(target.settings.database_url)
    try:
        async with session_factory(engine)() as session:
            await _provider(session, target)
    finally:
        await engine.dispose()


async def device_login(target: Target, say: Callable[[str], None]) -> str:
    client_id = target.settings.codex_client_id
    async with oauth.new_session() as session:
        code = await oauth.request_device_code(session, target.issuer, client_id)
        say(
            f"Open {code.verification_url} and enter the code {code.user_code} "
            "(it expires in 15 minutes; never share it)."
        )
        loop = asyncio.get_running_loop()
        ends = loop.time() + LOGIN_TIMEOUT_S
        while True:
            try:
                tokens = await oauth.poll_device_code(
                    session, target.issuer, client_id, code.device_auth_id, code.user_code
                )
                break
            except oauth.AuthorizationPending:
                if loop.time() >= ends:
                    raise LoginFailed("the device code expired before it was approved") from None
                await asyncio.sleep(code.interval_s)
    return await _keep(target, tokens)


async def browser_login(
    target: Target, say: Callable[[str], None], *, port: int, open_browser: bool
) -> str:
    client_id = target.settings.codex_client_id
    pkce = oauth.Pkce.new()
    state = secrets.token_urlsafe(32)
    arrived: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def callback(request: web.Request) -> web.Response:
        query = request.query
        if query.get("state") != state:
            return web.Response(status=400, text="State mismatch")
        if "error" in query:
            message = query.get("error_description") or query["error"]
            if not arrived.done():
                arrived.set_exception(LoginFailed(f"the issuer refused: {message}"))
            return web.Response(status=400, text=f"Sign-in failed: {message}")
        code = query.get("code")
        if not code:
            return web.Response(status=400, text="Missing authorization code")
        if not arrived.done():
            arrived.set_result(code)
        return web.Response(text="Signed in. You can close this window and return to the terminal.")

    app = web.Application()
    app.router.add_get("/auth/callback", callback)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", port)
        try:
            await site.start()
        except OSError as exc:
            raise LoginFailed(
                f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); "
                "choose another --port or use --device"
            ) from None
        bound = runner.addresses[0][1]
        redirect_uri = f"http://localhost:{bound}/auth/callback"
        url = oauth.authorize_url(target.issuer, client_id, redirect_uri, pkce, state)
        say(f"Open this URL to sign in with your ChatGPT account:\n{url}")
        if open_browser:
            webbrowser.open(url)
        try:
            code = await asyncio.wait_for(arrived, LOGIN_TIMEOUT_S)
        except TimeoutError:
            raise LoginFailed("no sign-in arrived in 15 minutes") from None
        async with oauth.new_session() as session:
            tokens = await oauth.exchange_code(
                session, target.issuer, client_id, code, pkce.verifier, redirect_uri
            )
    finally:
        await runner.cleanup()
    return await _keep(target, tokens)


async def status(target: Target) -> str:
    engine = create_engine(target.settings.database_url)
    try:
        async with session_factory(engine)() as session:
            provider = await _provider(session, target)
            rows = await accounts_of(session, provider.id)
    finally:
        await engine.dispose()
    if not rows:
        return f"{target.provider}: no ChatGPT account signed in"
    return "\n".join(_line(target.provider, row, resource) for row, resource in rows)


def _line(provider: str, row: CodexAccount, resource: ProviderResource | None) -> str:
    limits = row.limits or {}
    primary = limits.get("primary") or {}
    used = primary.get("used_percent")
    expires = row.access_expires_at
    parts = [
        f"{provider}/{resource.name if resource else '-'}: {row.email or row.account_id}"
        f" ({row.plan_type or 'unknown plan'})",
        f"token expires {expires:%Y-%m-%d %H:%M} UTC" if expires else "token expiry unknown",
        f"primary window {'unknown' if used is None else f'{used:g}% used'}",
    ]
    if resource is not None and resource.disabled:
        parts.append("resource disabled")
    if row.exhausted_until is not None:
        parts.append(f"usage limit reached until {row.exhausted_until:%Y-%m-%d %H:%M} UTC")
    return ", ".join(parts)


async def logout(target: Target) -> int:
    engine = create_engine(target.settings.database_url)
    try:
        async with session_factory(engine)() as session, session.begin():
            provider = await _provider(session, target)
            removed = await sign_out(session, provider.id, target.resource)
            await bump_generation(session)
            return removed
    finally:
        await engine.dispose()


__all__ = ["LoginFailed", "OAuthError", "Target", "browser_login", "device_login"]

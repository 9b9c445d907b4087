"""The `openai_codex` providers' signed-in accounts, as this process holds them: each one's
access token kept fresh, and its usage limits.

Each account is one resource of its provider (codex_vault.py keeps a `codex_accounts` row per
account, tied to a `provider_resources` row), so routing picks the account of every attempt
as it picks any resource (gateway/resources.py), and the attempt's ProviderSnap names it
(`resource_id`). Everything here is kept per account, keyed by that resource id (`key`): a
ProviderSnap without one (the health probe's, a provider that never had resources) stands
for the provider's first account.

The tokens live sealed in the database (llmrelay/codex_vault.py, behind `AccountVault`); a
process reads them once per config snapshot (a sign-in or sign-out moves the generation),
then serves every call from memory. A token within `margin_s` of
its expiry is refreshed before it is used, under the vault's lock on the account (so two
replicas never spend the same single-use refresh token: the second finds the tokens moved
on and takes them). A 401 from the backend refreshes once more (accounts are signed out
elsewhere, tokens revoked) and the call is sent again once (transport.py).

Off the request path except when a token must be read or refreshed: a database read and an
issuer call, about once per token lifetime per process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import aiohttp
import orjson
import structlog

from llmrelay.providers.codex import limits as usage_limits
from llmrelay.providers.codex import oauth
from llmrelay.providers.codex.oauth import Identity, Tokens
from llmrelay.snapshot.model import ProviderSnap

log = structlog.get_logger(__name__)

DEFAULT_BACKEND: Final = "https://chatgpt.com/backend-api/codex"
#: Refresh this long before the access token expires.
DEFAULT_MARGIN_S: Final = 300.0
#: Write the usage limits seen in answers' headers at most this often per account (their
#: exhaustion is written at once).
_SAVE_EVERY_S: Final = 30.0
#: How long a refused refresh is not tried again (a new sign-in is read at once).
_REFUSED_S: Final = 60.0


class AccountMissing(LookupError):
    """No ChatGPT account is signed in for the provider (`llmrelay codex login`)."""


def _missing(provider: ProviderSnap) -> AccountMissing:
    if provider.resource_id is not None:
        return AccountMissing("no ChatGPT account is signed in for this resource")
    return AccountMissing("no ChatGPT account is signed in for this provider")


@dataclass(frozen=True, slots=True)
class StoredAccount:
    id: str
    provider_id: str
    account_id: str
    email: str | None
    plan_type: str | None
    issuer: str
    client_id: str
    tokens: Tokens
    expires_at: datetime | None
    generation: int
    limits: dict[str, Any]
    exhausted_until: datetime | None
    #: The provider resource the account is the credential of.
    resource_id: str | None = None


def key(provider: ProviderSnap) -> str:
    """What this process keeps an account under: the attempt's resource, else the
    provider (its first account)."""
    return provider.resource_id or provider.id


class AccountVault(Protocol):
    """Where accounts are kept (the database; llmrelay/codex_vault.py)."""

    async def load(self, provider_id: str, resource_id: str | None) -> StoredAccount | None:
        """The resource's account (the provider's first one for None), tokens opened; None
        when none is signed in."""
        ...

    async def refresh_locked(
        self, row_id: str, seen_generation: int, refresh: Callable[[StoredAccount], Any]
    ) -> StoredAccount | None:
        """Under a lock on the account row `row_id`: when its tokens are still those of
        `seen_generation`, `await refresh(account)` -> (Tokens, Identity) is stored (the
        generation moves); else the newer stored tokens are returned untouched."""
        ...

    async def save_limits(
        self, row_id: str, limits: dict[str, Any], exhausted_until: datetime | None
    ) -> None: ...


class CodexAccounts:
    """Built once per process (stack.py); the transport and the admin API read it."""

    def __init__(
        self,
        vault: AccountVault,
        *,
        margin_s: float = DEFAULT_MARGIN_S,
        issuer: str = oauth.DEFAULT_ISSUER,
        client_id: str = oauth.DEFAULT_CLIENT_ID,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.vault = vault
        #: Where new sign-ins go (the console's device code; LLMRELAY_CODEX_ISSUER).
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self.margin_s = margin_s
        self.clock = clock
        self._held: dict[str, StoredAccount] = {}
        #: The snapshot's provider each account was read for: a new snapshot (a sign-in or
        #: sign-out moves the config generation) reads it again, once.
        self._read_for: dict[str, ProviderSnap] = {}
        #: Resources found without an account, and the snapshot's provider they were looked
        #: up for: not looked up again (one query per call) until a new snapshot.
        self._missing: dict[str, ProviderSnap] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._session: aiohttp.ClientSession | None = None
        self._saved_at: dict[str, float] = {}
        #: account key -> (until when, the token generation, the issuer's refusal): a refresh
        #: token the issuer refused is not offered again for a while (every call would).
        self._refused: dict[str, tuple[float, tuple[str, int], str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- tokens ------------------------------------------------------------------------

    def held(self, account_key: str) -> StoredAccount | None:
        """The account as this process last read it (no I/O)."""
        return self._held.get(account_key)

    async def account(self, provider: ProviderSnap) -> StoredAccount:
        """The attempt's account with an access token good for `margin_s` more; raises
        AccountMissing, or oauth.OAuthError when a due refresh was refused."""
        at = key(provider)
        held = self._held.get(at)
        if held is not None and self._read_for.get(at) is provider and not self._due(held):
            return held
        if self._missing.get(at) is provider:
            raise _missing(provider)
        async with self._lock(at):
            held = self._held.get(at)
            if held is None or self._read_for.get(at) is not provider or self._due(held):
                held = await self._load(provider)
                self._read_for[at] = provider
                if self._due(held):
                    held = await self._refresh(at, held)
            return held

    async def refreshed(self, provider: ProviderSnap, used: StoredAccount) -> StoredAccount:
        """After the backend refused `used`'s access token: newer tokens (another process's
        refresh) or a refresh now. Raises as `account` does."""
        at = key(provider)
        async with self._lock(at):
            held = self._held.get(at)
            if held is not None and _moved(held, used):
                return held
            held = await self._load(provider)
            if _moved(held, used):
                return held
            return await self._refresh(at, held)

    def forget(self, provider_id: str) -> None:
        """Read the provider's accounts again on their next use (a sign-in or sign-out)."""
        for at in [k for k, held in self._held.items() if held.provider_id == provider_id]:
            self._held.pop(at, None)
            self._read_for.pop(at, None)
        self._held.pop(provider_id, None)
        self._read_for.pop(provider_id, None)
        for at in [k for k, snap in self._missing.items() if snap.id == provider_id]:
            self._missing.pop(at, None)

    def _due(self, account: StoredAccount) -> bool:
        expires = account.expires_at
        return expires is not None and expires.timestamp() - self.clock() < self.margin_s

    def _lock(self, account_key: str) -> asyncio.Lock:
        lock = self._locks.get(account_key)
        if lock is None:
            lock = self._locks[account_key] = asyncio.Lock()
        return lock

    async def _load(self, provider: ProviderSnap) -> StoredAccount:
        at = key(provider)
        found = await self.vault.load(provider.id, provider.resource_id)
        if found is None:
            self._held.pop(at, None)
            self._missing[at] = provider
            raise _missing(provider)
        self._missing.pop(at, None)
        self._held[at] = found
        return found

    async def _refresh(self, at: str, account: StoredAccount) -> StoredAccount:
        refused = self._refused.get(at)
        tokens = (account.id, account.generation)
        if refused is not None and refused[0] > self.clock() and refused[1] == tokens:
            raise oauth.OAuthError(refused[2])  # not asked again within _REFUSED_S
        try:
            return await self._refresh_now(at, account)
        except oauth.OAuthError as failed:
            if failed.status is not None:  # the issuer answered no: sign in again
                until = self.clock() + _REFUSED_S
                self._refused[at] = (until, tokens, str(failed))
            raise

    async def _refresh_now(self, at: str, account: StoredAccount) -> StoredAccount:
        session = self.session()

        async def refresh(current: StoredAccount) -> tuple[Tokens, Identity]:
            tokens = await oauth.refresh(
                session, current.issuer, current.client_id, current.tokens.refresh_token
            )
            if not tokens.id_token:  # the issuer may leave the id token out
                tokens = replace(tokens, id_token=current.tokens.id_token)
            try:
                found = oauth.identity(tokens)
            except oauth.OAuthError:
                found = Identity(current.account_id, current.email, current.plan_type)
            return tokens, found

        stored = await self.vault.refresh_locked(account.id, account.generation, refresh)
        if stored is None:
            self._held.pop(at, None)
            raise AccountMissing("the ChatGPT account was signed out meanwhile")
        self._held[at] = stored
        log.info("codex_tokens_refreshed", provider_id=account.provider_id, account=at)
        return stored

    # -- usage limits ------------------------------------------------------------------

    def exhausted_until(self, account_key: str) -> float | None:
        """Until when (Unix seconds) the held account is out of its usage limit, or None."""
        held = self._held.get(account_key)
        if held is None or held.exhausted_until is None:
            return None
        until = held.exhausted_until.timestamp()
        return until if until > self.clock() else None

    def observe(self, account_key: str, header: Callable[[str], str | None]) -> None:
        """An answer's x-codex-* headers -> the held limits (written now and then)."""
        seen = usage_limits.from_headers(header, self.clock())
        if seen:
            self._note(account_key, seen, force=False)

    def limit_reached(self, account_key: str, body: bytes, retry_after: str | None) -> bool:
        """A 429 -> whether it says the usage limit is reached (then the account rests
        until its reset, written at once)."""
        now = self.clock()
        until = usage_limits.limit_reached_until(body, retry_after, now)
        if until is None:
            return False
        held = self._held.get(account_key)
        if held is not None:
            limits = {**held.limits, "exhausted_reason": usage_limits.USAGE_LIMIT_REACHED}
            self._set(account_key, held, limits, datetime.fromtimestamp(until, UTC), persist=True)
        return True

    def _note(self, account_key: str, seen: dict[str, Any], *, force: bool) -> None:
        held = self._held.get(account_key)
        if held is None:
            return
        now = self.clock()
        limits = {**held.limits, **seen, "seen_at": round(now)}
        until = usage_limits.exhausted_until(limits, now)
        exhausted = datetime.fromtimestamp(until, UTC) if until is not None else None
        changed = (exhausted is None) != (held.exhausted_until is None)
        due = now - self._saved_at.get(held.id, 0.0) >= _SAVE_EVERY_S
        self._set(account_key, held, limits, exhausted, persist=force or changed or due)

    def _set(
        self,
        account_key: str,
        held: StoredAccount,
        limits: dict[str, Any],
        exhausted: datetime | None,
        *,
        persist: bool,
    ) -> None:
        self._held[account_key] = replace(held, limits=limits, exhausted_until=exhausted)
        if persist:
            self._saved_at[held.id] = self.clock()
            task = asyncio.get_running_loop().create_task(self._save(held.id, limits, exhausted))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _save(self, row_id: str, limits: dict[str, Any], until: datetime | None) -> None:
        try:
            await self.vault.save_limits(row_id, limits, until)
        except Exception:  # a background write: logged; the next one tries again
            log.exception("codex_limits_not_saved", account=row_id)

    async def fetch_usage(self, provider: ProviderSnap) -> dict[str, Any]:
        """Ask the backend's usage endpoint now for the account of `provider` (a resource's
        copy names it); the limits (also kept and written)."""
        account = await self.account(provider)
        url = usage_url(provider.base_url or DEFAULT_BACKEND)
        headers = {
            "authorization": f"Bearer {account.tokens.access_token}",
            "chatgpt-account-id": account.account_id,
            "accept": "application/json",
        }
        try:
            async with self.session().get(url, headers=headers, allow_redirects=False) as answer:
                raw, status = await answer.read(), answer.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise oauth.OAuthError(
                f"cannot reach the usage endpoint: {type(exc).__name__}"
            ) from None
        if status != 200:
            raise oauth.OAuthError(f"the usage endpoint answered {status}", status=status)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise oauth.OAuthError("the usage endpoint's answer is not JSON") from None
        seen = usage_limits.from_usage(body if isinstance(body, dict) else {})
        self._note(key(provider), seen, force=True)
        held = self._held.get(key(provider))
        return held.limits if held is not None else seen

    async def settled(self) -> None:
        """Every limits write begun so far is done (the admin API reads them back)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- life --------------------------------------------------------------------------

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = oauth.new_session()
        return self._session

    async def close(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()


def _moved(held: StoredAccount, used: StoredAccount) -> bool:
    """Whether `held` has other tokens than `used` (a refresh, or a new sign-in)."""
    return held.id != used.id or held.generation != used.generation


def usage_url(base_url: str) -> str:
    """The usage endpoint next to the Codex backend: `.../backend-api/codex` ->
    `.../backend-api/wham/usage`."""
    base = base_url.rstrip("/")
    return f"{base.removesuffix('/codex')}/wham/usage"

"""The transport of `openai_codex` providers: the shared HTTP transport, with a ChatGPT
account signed onto each request: the one routing picked for the attempt (each account is a
resource of the provider, and the attempt's ProviderSnap names it), else the provider's first.

Before a call: the account's access token (refreshed first when it is about to expire,
accounts.py); an account resting after its usage limit was reached is not called at all
(`UpstreamUnavailable`: the next account, then the next route, is tried at once, no
breaker counts it). After: the answer's x-codex-* headers update the account's usage
limits; a 401 refreshes the tokens and sends the request once more; a 429 saying
`usage_limit_reached` rests the account until its reset and tries the next account.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from llmrelay.providers.base import Transport, UpstreamRequest, UpstreamResponse
from llmrelay.providers.codex.accounts import AccountMissing, CodexAccounts, StoredAccount, key
from llmrelay.providers.codex.oauth import OAuthError
from llmrelay.providers.errors import UpstreamError, UpstreamUnavailable
from llmrelay.snapshot.model import ProviderSnap


class CodexTransport:
    def __init__(self, inner: Transport, accounts: CodexAccounts) -> None:
        self._inner = inner
        self.accounts = accounts

    async def send(self, request: UpstreamRequest, provider: ProviderSnap) -> UpstreamResponse:
        accounts = self.accounts
        at = key(provider)  # the account routing picked for this attempt (its resource)
        account = await self._account(provider)
        resting = accounts.exhausted_until(at)
        if resting is not None:
            raise UpstreamUnavailable(
                "the ChatGPT account's usage limit is reached until "
                f"{datetime.fromtimestamp(resting, UTC):%Y-%m-%d %H:%M} UTC",
                retry_at=resting,
            )
        response = await self._inner.send(signed(request, account), provider)
        if response.status == 401:
            await _drain(response)
            try:
                account = await accounts.refreshed(provider, account)
            except (AccountMissing, OAuthError) as refused:
                raise UpstreamUnavailable(f"{refused}; sign the account in again") from None
            response = await self._inner.send(signed(request, account), provider)
        accounts.observe(at, response.header)
        if response.status == 429:
            body = await _drain(response)
            if accounts.limit_reached(at, body, response.header("retry-after")):
                until = accounts.exhausted_until(at) or time.time() + 60
                raise UpstreamUnavailable(
                    "the ChatGPT account's usage limit is reached", retry_at=until
                )
            return Buffered(response, body)
        return response

    async def _account(self, provider: ProviderSnap) -> StoredAccount:
        try:
            return await self.accounts.account(provider)
        except AccountMissing as missing:
            raise UpstreamUnavailable(f"{missing} (llmrelay codex login)") from None
        except OAuthError as refused:
            raise UpstreamUnavailable(
                f"the tokens could not be refreshed ({refused}); sign the account in again"
            ) from None


def signed(request: UpstreamRequest, account: StoredAccount) -> UpstreamRequest:
    headers = {
        **request.headers,
        "authorization": f"Bearer {account.tokens.access_token}",
        "chatgpt-account-id": account.account_id,
    }
    return UpstreamRequest(
        request.url, headers, request.body, request.translate, request.method, request.dropped
    )


async def _drain(response: UpstreamResponse) -> bytes:
    try:
        return await response.read()
    except UpstreamError:
        return b""
    finally:
        response.release()


class Buffered:
    """An answer already read (an error's body), readable again by the executor."""

    __slots__ = ("_body", "_inner", "_sent", "status")

    def __init__(self, inner: UpstreamResponse, body: bytes) -> None:
        self._inner = inner
        self._body = body
        self._sent = False
        self.status = inner.status

    def header(self, name: str) -> str | None:
        return self._inner.header(name)

    async def read(self) -> bytes:
        return self._body

    async def next_chunk(self) -> bytes:
        if self._sent:
            return b""
        self._sent = True
        return self._body

    def release(self) -> None:
        """Released when it was read."""

"""The identity provider over HTTP (aiohttp): its discovery document and keys (kept for an
hour; the keys read again once when a token names a key not seen yet) and the token exchange.
Bounded by a timeout; a provider that fails is a clear 502, never a hang."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp

from llmrelay.admin.sso.config import SsoConfig

TIMEOUT_S = 10.0
#: How long a discovery document and a key set are kept.
KEEP_S = 3600.0


class ProviderFailed(RuntimeError):
    """The identity provider could not be reached, or answered something unusable."""


@dataclass
class _Kept:
    value: Any
    until: float


@dataclass
class ProviderClient:
    config: SsoConfig
    _kept: dict[str, _Kept] = field(default_factory=dict)

    async def _get(self, url: str) -> Any:
        try:
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
            async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as answer:
                if answer.status != 200:
                    raise ProviderFailed(f"{url} answered {answer.status}")
                return await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ProviderFailed(f"{url}: {exc or type(exc).__name__}") from None

    async def _kept_or(self, name: str, url: str, fresh: bool = False) -> Any:
        held = self._kept.get(name)
        if held is not None and held.until > time.monotonic() and not fresh:
            return held.value
        value = await self._get(url)
        self._kept[name] = _Kept(value, time.monotonic() + KEEP_S)
        return value

    async def discovery(self) -> dict[str, Any]:
        url = f"{self.config.issuer}/.well-known/openid-configuration"
        found = await self._kept_or("discovery", url)
        if not isinstance(found, dict):
            raise ProviderFailed("the discovery document is not an object")
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(found.get(name), str):
                raise ProviderFailed(f"the discovery document has no {name}")
        if str(found.get("issuer", "")).rstrip("/") != self.config.issuer:
            raise ProviderFailed("the discovery document names another issuer")
        return found

    async def keys(self, fresh: bool = False) -> list[dict[str, Any]]:
        found = await self._kept_or("jwks", (await self.discovery())["jwks_uri"], fresh)
        keys = found.get("keys") if isinstance(found, dict) else None
        if not isinstance(keys, list):
            raise ProviderFailed("the provider's key set has no keys")
        return [k for k in keys if isinstance(k, dict)]

    async def exchange(self, code: str, verifier: str, redirect_uri: str) -> dict[str, Any]:
        """The code for tokens (client_secret_basic when there is a secret, else a public
        client with PKCE only)."""
        endpoint = (await self.discovery())["token_endpoint"]
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "client_id": self.config.client_id,
        }
        headers = {"Accept": "application/json"}
        if self.config.client_secret is not None:  # client_secret_basic (RFC 6749 2.3.1)
            client, secret = (
                quote(v, safe="") for v in (self.config.client_id, self.config.client_secret)
            )
            pair = f"{client}:{secret}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        try:
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.post(endpoint, data=form, headers=headers) as answer,
            ):
                body = await answer.json(content_type=None)
                if answer.status != 200 or not isinstance(body, dict):
                    error = body.get("error") if isinstance(body, dict) else None
                    raise ProviderFailed(
                        f"the token endpoint answered {answer.status} {error or ''}"
                    )
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ProviderFailed(f"the token endpoint: {exc or type(exc).__name__}") from None

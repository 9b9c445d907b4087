"""The ChatGPT OAuth issuer, as the public Codex CLI uses it (https://auth.openai.com).

Three ways to tokens, all ending at `POST {issuer}/oauth/token`:

- browser (PKCE): the user opens `{issuer}/oauth/authorize?...` and the issuer redirects to
  a loopback listener with `code`; the code and the PKCE verifier buy the tokens;
- device code: `POST {issuer}/api/accounts/deviceauth/usercode` gives a user code to type at
  `{issuer}/codex/device`; polling `.../deviceauth/token` answers 403/404 until the user
  approved, then an authorization code with the PKCE pair the issuer made; the code is
  exchanged with the redirect URI `{issuer}/deviceauth/callback`;
- refresh: `grant_type=refresh_token` (a refresh token is single use: the answer carries
  the next one).

The id token's claims name the ChatGPT account (`https://api.openai.com/auth` ->
`chatgpt_account_id`, `chatgpt_plan_type`) and the email; the access token's `exp` says when
it must be refreshed. Tokens are read, never verified here: they come from the issuer over
TLS, and only the backend that accepts them judges them.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlencode

import aiohttp
import orjson

#: The public Codex CLI's OAuth client and issuer.
DEFAULT_CLIENT_ID: Final = "app_EMoamEEZ73f0CkXaXp7hrann"
DEFAULT_ISSUER: Final = "https://auth.openai.com"
SCOPES: Final = "openid profile email offline_access"
#: The claim holding the ChatGPT account in the id token.
AUTH_CLAIM: Final = "https://api.openai.com/auth"
_TIMEOUT: Final = aiohttp.ClientTimeout(total=30)


class OAuthError(RuntimeError):
    """The issuer refused or could not be reached; the message says which, without tokens."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class AuthorizationPending(OAuthError):
    """Device code flow: the user has not approved yet (poll again after the interval)."""


@dataclass(frozen=True, slots=True)
class Tokens:
    access_token: str
    refresh_token: str
    id_token: str

    def as_json(self) -> bytes:
        return orjson.dumps(
            {
                "access_token": self.access_token,
                "refresh_token": self.refresh_token,
                "id_token": self.id_token,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> Tokens:
        data = orjson.loads(raw)
        return cls(data["access_token"], data["refresh_token"], data.get("id_token") or "")


@dataclass(frozen=True, slots=True)
class Identity:
    """What the id token says about the account."""

    account_id: str
    email: str | None
    plan_type: str | None


@dataclass(frozen=True, slots=True)
class DeviceCode:
    device_auth_id: str
    user_code: str
    verification_url: str
    interval_s: int


@dataclass(frozen=True, slots=True)
class Pkce:
    verifier: str
    challenge: str

    @classmethod
    def new(cls) -> Pkce:
        verifier = secrets.token_urlsafe(64)
        digest = hashlib.sha256(verifier.encode()).digest()
        return cls(verifier, base64.urlsafe_b64encode(digest).decode().rstrip("="))


def claims(jwt: str) -> dict[str, Any]:
    """A JWT's payload, unverified; {} when it is not a JWT."""
    parts = jwt.split(".")
    if len(parts) != 3 or not parts[1]:
        return {}
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return {}
    return payload if isinstance(payload, dict) else {}


def identity(tokens: Tokens) -> Identity:
    """The account the tokens are for; OAuthError when the id token names none."""
    found = claims(tokens.id_token)
    auth = found.get(AUTH_CLAIM)
    account = auth.get("chatgpt_account_id") if isinstance(auth, dict) else None
    if not isinstance(account, str) or not account:
        raise OAuthError("the id token names no ChatGPT account (chatgpt_account_id)")
    profile = found.get("https://api.openai.com/profile")
    email = found.get("email") or (profile.get("email") if isinstance(profile, dict) else None)
    plan = auth.get("chatgpt_plan_type") if isinstance(auth, dict) else None
    return Identity(
        account,
        email if isinstance(email, str) else None,
        plan if isinstance(plan, str) else None,
    )


def expires_at(tokens: Tokens) -> datetime | None:
    """When the access token expires (its `exp`), None when it does not say."""
    exp = claims(tokens.access_token).get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return datetime.fromtimestamp(exp, UTC)
    return None


def authorize_url(issuer: str, client_id: str, redirect_uri: str, pkce: Pkce, state: str) -> str:
    """Where the browser flow sends the user."""
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": SCOPES,
        "code_challenge": pkce.challenge,
        "code_challenge_method": "S256",
        "id_token_add_organizations": "true",
        "codex_cli_simplified_flow": "true",
        "state": state,
    }
    return f"{issuer.rstrip('/')}/oauth/authorize?{urlencode(query)}"


def device_redirect_uri(issuer: str) -> str:
    return f"{issuer.rstrip('/')}/deviceauth/callback"


def new_session() -> aiohttp.ClientSession:
    """A session for the issuer (no proxy from the environment, no redirects followed by the
    calls below)."""
    return aiohttp.ClientSession(timeout=_TIMEOUT, trust_env=False)


async def exchange_code(
    session: aiohttp.ClientSession,
    issuer: str,
    client_id: str,
    code: str,
    verifier: str,
    redirect_uri: str,
) -> Tokens:
    """An authorization code (either flow) -> tokens."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "client_id": client_id,
        "code_verifier": verifier,
    }
    return _tokens(await _post_form(session, f"{issuer.rstrip('/')}/oauth/token", form))


async def refresh(
    session: aiohttp.ClientSession, issuer: str, client_id: str, refresh_token: str
) -> Tokens:
    """New tokens for a refresh token (spent by this call). OAuthError with `status` 400/401
    when the issuer refuses it (expired, revoked or already used: sign in again)."""
    form = {
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": client_id,
        "scope": "openid profile email",
    }
    answer = await _post_form(session, f"{issuer.rstrip('/')}/oauth/token", form)
    answer.setdefault("refresh_token", refresh_token)
    return _tokens(answer)


async def request_device_code(
    session: aiohttp.ClientSession, issuer: str, client_id: str
) -> DeviceCode:
    base = issuer.rstrip("/")
    answer = await _post_json(
        session, f"{base}/api/accounts/deviceauth/usercode", {"client_id": client_id}
    )
    try:
        return DeviceCode(
            device_auth_id=str(answer["device_auth_id"]),
            user_code=str(answer.get("user_code") or answer["usercode"]),
            verification_url=f"{base}/codex/device",
            interval_s=max(1, int(str(answer.get("interval") or 5).strip())),
        )
    except (KeyError, ValueError):
        raise OAuthError("the issuer's device code answer is not readable") from None


async def poll_device_code(
    session: aiohttp.ClientSession, issuer: str, client_id: str, device_auth_id: str, user_code: str
) -> Tokens:
    """One poll: the tokens once the user approved; AuthorizationPending before."""
    base = issuer.rstrip("/")
    body = {"device_auth_id": device_auth_id, "user_code": user_code}
    try:
        answer = await _post_json(session, f"{base}/api/accounts/deviceauth/token", body)
    except OAuthError as refused:
        if refused.status in (403, 404):
            raise AuthorizationPending("waiting for the user to approve the code") from None
        raise
    try:
        code, verifier = str(answer["authorization_code"]), str(answer["code_verifier"])
    except KeyError:
        raise OAuthError("the issuer's device token answer is not readable") from None
    return await exchange_code(
        session, issuer, client_id, code, verifier, device_redirect_uri(issuer)
    )


async def _post_form(
    session: aiohttp.ClientSession, url: str, form: dict[str, str]
) -> dict[str, Any]:
    return await _post(session, url, data=urlencode(form), kind="application/x-www-form-urlencoded")


async def _post_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, str]
) -> dict[str, Any]:
    return await _post(session, url, data=orjson.dumps(body), kind="application/json")


async def _post(
    session: aiohttp.ClientSession, url: str, *, data: str | bytes, kind: str
) -> dict[str, Any]:
    try:
        async with session.post(
            url, data=data, headers={"content-type": kind}, allow_redirects=False
        ) as response:
            raw = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OAuthError(f"cannot reach the OAuth issuer: {type(exc).__name__}") from None
    try:
        answer = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        answer = {}
    if not 200 <= status < 300:
        code, message = _error(answer)
        raise OAuthError(
            f"the OAuth issuer answered {status}: {message or 'no reason given'}",
            status=status,
            code=code,
        )
    if not isinstance(answer, dict):
        raise OAuthError("the OAuth issuer's answer is not a JSON object")
    return answer


def _error(answer: Any) -> tuple[str | None, str | None]:
    """(code, message) of an issuer's error body, in the shapes it uses."""
    if not isinstance(answer, dict):
        return None, None
    error = answer.get("error")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
    else:
        code, message = error, answer.get("error_description")
    return (
        code if isinstance(code, str) else None,
        message if isinstance(message, str) else (code if isinstance(code, str) else None),
    )


def _tokens(answer: dict[str, Any]) -> Tokens:
    access, refresh_token = answer.get("access_token"), answer.get("refresh_token")
    id_token = answer.get("id_token") or ""
    if not isinstance(access, str) or not isinstance(refresh_token, str):
        raise OAuthError("the issuer's token answer has no access or refresh token")
    return Tokens(access, refresh_token, id_token if isinstance(id_token, str) else "")

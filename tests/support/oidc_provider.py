"""A real OpenID Connect provider on loopback for tests (aiohttp, in its own thread): discovery
(`/.well-known/openid-configuration`), the authorization endpoint (authorization code flow,
PKCE S256 required), the token endpoint (client secret by HTTP Basic or in the form) answering
an ID token signed RS256 with its own key, and the JWKS that publishes the key.

The person who "signs in" at the provider is whoever the test set as `provider.person`
(email, name, groups): the authorization endpoint approves at once and redirects back with a
code, as an identity provider does for a user already signed in there. `provider.tamper` makes
it misbehave on purpose (a wrong audience, an expired token, another key, a wrong nonce)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.support.background_app import BackgroundApp
from tests.support.ports import free_port


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@cache
def _signing_keys() -> tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]:
    """The provider's signing key and the other key a tampered token is signed with: made
    once per test process (two RSA-2048 keys cost 0.1-0.5 s of CPU, seconds on a loaded
    machine); each provider has its own issuer and port, so sharing them mixes nothing up."""
    return (
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )


@dataclass
class Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    nonce: str | None
    person: dict[str, Any]


@dataclass
class OidcProvider:
    client_id: str = "llmrelay-console"
    client_secret: str = "oidc-client-secret-0123456789"
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    #: Who is signed in at the provider: the claims of the next ID token.
    person: dict[str, Any] = field(
        default_factory=lambda: {"email": "sso@example.com", "name": "Single Sign", "groups": []}
    )
    #: "audience", "expired", "key", "nonce": an ID token wrong in that way.
    tamper: str | None = None
    #: Every token request's form, as received (the tests check PKCE and the client's secret).
    token_requests: list[dict[str, str]] = field(default_factory=list)
    _grants: dict[str, Grant] = field(default_factory=dict)
    _served: BackgroundApp = field(default_factory=lambda: BackgroundApp("oidc-provider"))

    def __post_init__(self) -> None:
        self.key, self.other_key = _signing_keys()
        self.kid = "test-key-1"

    @property
    def issuer(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> OidcProvider:
        self._served.start(self._app(), self.host, self.port)
        return self

    def stop(self) -> None:
        self._served.stop()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        app.router.add_get("/jwks", self._jwks)
        return app

    async def _discovery(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                ],
            }
        )

    async def _jwks(self, _request: web.Request) -> web.Response:
        numbers = self.key.public_key().public_numbers()
        key = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid}
        key |= {"n": _int(numbers.n), "e": _int(numbers.e)}
        return web.json_response({"keys": [key]})

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("client_id") != self.client_id or query.get("response_type") != "code":
            return web.Response(status=400, text="unknown client or response type")
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return web.Response(status=400, text="PKCE (S256) is required")
        if "openid" not in query.get("scope", "").split():
            return web.Response(status=400, text="the openid scope is required")
        code = secrets.token_urlsafe(24)
        self._grants[code] = Grant(
            self.client_id,
            query["redirect_uri"],
            query["code_challenge"],
            query.get("nonce"),
            dict(self.person),
        )
        target = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query["state"]})
        raise web.HTTPFound(target)

    def _client_of(self, request: web.Request, form: dict[str, str]) -> tuple[str, str]:
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            return user, password
        return form.get("client_id", ""), form.get("client_secret", "")

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_requests.append(form)
        if self._client_of(request, form) != (self.client_id, self.client_secret):
            return web.json_response({"error": "invalid_client"}, status=401)
        grant = self._grants.pop(form.get("code", ""), None)
        if grant is None or form.get("grant_type") != "authorization_code":
            return web.json_response({"error": "invalid_grant"}, status=400)
        if form.get("redirect_uri") != grant.redirect_uri:
            return web.json_response({"error": "invalid_grant"}, status=400)
        verifier = form.get("code_verifier", "")
        if b64url(hashlib.sha256(verifier.encode()).digest()) != grant.challenge:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "PKCE"}, status=400
            )
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": hashlib.sha256(grant.person["email"].encode()).hexdigest()[:24],
            "aud": "someone-else" if self.tamper == "audience" else grant.client_id,
            "iat": now,
            "exp": now - 60 if self.tamper == "expired" else now + 300,
            "nonce": "not-the-nonce" if self.tamper == "nonce" else grant.nonce,
            "email_verified": True,
            **grant.person,
        }
        return web.json_response(
            {
                "access_token": secrets.token_urlsafe(24),
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": self.sign(claims),
            }
        )

    def sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        key = self.other_key if self.tamper == "key" else self.key
        signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing + "." + b64url(signature)

    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

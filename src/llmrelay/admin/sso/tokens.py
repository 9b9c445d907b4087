"""ID tokens: a JWT signed RS256 by the provider, checked here with `cryptography` against
the provider's published keys (JWKS), then its claims: issuer, audience, expiry (a minute of
clock skew allowed), nonce."""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

#: Seconds a token's times may be off from this clock.
SKEW_S = 60


class TokenRefused(ValueError):
    """An ID token that is malformed, not signed by the provider, or not for this sign-in."""


def _b64(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except ValueError:
        raise TokenRefused("the ID token is not base64url") from None


def _int(part: str) -> int:
    return int.from_bytes(_b64(part), "big")


def _key(jwk: Mapping[str, Any]) -> rsa.RSAPublicKey:
    return rsa.RSAPublicNumbers(_int(str(jwk["e"])), _int(str(jwk["n"]))).public_key()


def header_of(token: str) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenRefused("the ID token is not a signed JWT")
    try:
        header = orjson.loads(_b64(parts[0]))
    except orjson.JSONDecodeError:
        raise TokenRefused("the ID token's header is not JSON") from None
    if not isinstance(header, dict):
        raise TokenRefused("the ID token's header is not an object")
    return header


def verify(
    token: str,
    keys: Sequence[Mapping[str, Any]],
    *,
    issuer: str,
    audience: str,
    nonce: str,
    now: float | None = None,
) -> dict[str, Any]:
    """The claims of `token` once its signature and claims hold, else TokenRefused."""
    header = header_of(token)
    if header.get("alg") != "RS256":
        raise TokenRefused(f"the ID token is signed with {header.get('alg')!r}, not RS256")
    kid = header.get("kid")
    candidates = [k for k in keys if k.get("kty") == "RSA" and (kid is None or k.get("kid") == kid)]
    if not candidates:
        raise TokenRefused("no published key of the provider matches the ID token's")
    signing, _, signature = token.rpartition(".")
    for jwk in candidates:
        try:
            _key(jwk).verify(_b64(signature), signing.encode(), padding.PKCS1v15(), hashes.SHA256())
            break
        except (InvalidSignature, KeyError, ValueError):
            continue
    else:
        raise TokenRefused("the ID token's signature does not verify with the provider's keys")
    try:
        claims = orjson.loads(_b64(token.split(".")[1]))
    except orjson.JSONDecodeError:
        raise TokenRefused("the ID token's claims are not JSON") from None
    if not isinstance(claims, dict):
        raise TokenRefused("the ID token's claims are not an object")
    moment = time.time() if now is None else now
    audiences = claims.get("aud")
    audiences = audiences if isinstance(audiences, list) else [audiences]
    if str(claims.get("iss", "")).rstrip("/") != issuer.rstrip("/"):
        raise TokenRefused("the ID token was issued by another provider")
    if audience not in audiences:
        raise TokenRefused("the ID token is for another client")
    if not isinstance(claims.get("exp"), int | float) or claims["exp"] < moment - SKEW_S:
        raise TokenRefused("the ID token has expired")
    if isinstance(claims.get("iat"), int | float) and claims["iat"] > moment + SKEW_S:
        raise TokenRefused("the ID token is issued in the future")
    if claims.get("nonce") != nonce:
        raise TokenRefused("the ID token is not for this sign-in (nonce)")
    return claims

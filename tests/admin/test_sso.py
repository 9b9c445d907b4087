"""Single sign-on's pieces without a browser: the role map as the setting is written, and ID
tokens checked against real RS256 signatures (a real local provider's keys): a good one
passes; a forged, expired, foreign or replayed one does not."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from llmrelay.admin.access import Role
from llmrelay.admin.sso.config import SsoConfigError, parse_role_map
from llmrelay.admin.sso.tokens import TokenRefused, verify
from tests.support.oidc_provider import OidcProvider, b64url

ISSUER = "http://idp.example"


def test_the_role_map() -> None:
    assert parse_role_map("admins=tenant_admin, devs=acme:developer,ops=platform_admin") == {
        "admins": [(None, Role.TENANT_ADMIN)],
        "devs": [("acme", Role.DEVELOPER)],
        "ops": [(None, Role.PLATFORM_ADMIN)],
    }
    assert parse_role_map("") == {}
    for wrong in ("admins", "admins=", "admins=boss", "=viewer"):
        with pytest.raises(SsoConfigError, match="LLMRELAY_OIDC_ROLE_MAP"):
            parse_role_map(wrong)


@pytest.fixture(scope="module")
def provider() -> OidcProvider:
    return OidcProvider()  # its keys only: not started


def _keys(provider: OidcProvider) -> list[dict[str, Any]]:
    numbers = provider.key.public_key().public_numbers()

    def enc(value: int) -> str:
        return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))

    return [{"kty": "RSA", "kid": provider.kid, "n": enc(numbers.n), "e": enc(numbers.e)}]


def _claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": "client", "exp": now + 60, "iat": now, "nonce": "n1"} | changes


def _check(provider: OidcProvider, token: str) -> dict[str, Any]:
    return verify(token, _keys(provider), issuer=ISSUER, audience="client", nonce="n1")


def test_a_good_token_passes(provider: OidcProvider) -> None:
    claims = _check(provider, provider.sign(_claims(email="a@example.com")))
    assert claims["email"] == "a@example.com"
    listed = _check(provider, provider.sign(_claims(aud=["other", "client"])))
    assert listed["aud"] == ["other", "client"]


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (lambda: {"aud": "other"}, "another client"),
        (lambda: {"iss": "http://evil.example"}, "another provider"),
        (lambda: {"exp": int(time.time()) - 3600}, "expired"),
        (lambda: {"nonce": "replayed"}, "nonce"),
        (lambda: {"iat": int(time.time()) + 3600}, "future"),
    ],
)
def test_a_wrong_claim_is_refused(
    provider: OidcProvider, changes: Callable[[], dict[str, Any]], words: str
) -> None:
    # The times are taken when the test runs, not when it was collected: a run's late tests
    # start more than an hour after collection on a loaded machine ("future" was then past).
    with pytest.raises(TokenRefused, match=words):
        _check(provider, provider.sign(_claims(**changes())))


def test_a_forged_or_mangled_token_is_refused(provider: OidcProvider) -> None:
    good = provider.sign(_claims())
    head, body, signature = good.split(".")
    forged_body = b64url(b'{"iss": "http://idp.example", "aud": "client", "nonce": "n1"}')
    unsigned = b64url(b'{"alg": "none"}')
    for token, words in (
        (f"{head}.{forged_body}.{signature}", "signature"),
        (f"{head}.{body}", "signed JWT"),
        (f"{unsigned}.{body}.", "not RS256"),
    ):
        with pytest.raises(TokenRefused, match=words):
            _check(provider, token)
    provider.tamper = "key"
    try:
        with pytest.raises(TokenRefused, match="signature"):
            _check(provider, provider.sign(_claims()))
    finally:
        provider.tamper = None

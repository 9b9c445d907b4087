"""Credential detectors: each issuer's format, and the look-alikes left alone."""

from __future__ import annotations

import pytest

from llmrelay.guardrails import secrets

#: Made-up values in each documented format (none of them is a real credential).
OPENAI = "sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz12345_-Qa7"
OPENAI_LEGACY = "sk-" + "Zx9Qw8Er7Ty6Ui5Op4AsT3BlbkFJDf3Gh2Jk1Lz0Xc9Vb8Nm"
ANTHROPIC = "sk-ant-api03-AbCdEf1234567890abcdefGHIJKL_-xyz0987654321QwErTy"
AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_FINE = (
    "github_pat_11ABCDEFG0123456789_"
    + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVW"
)
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_HOOK = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
GOOGLE = "AIzaSyD-1234567890abcdefghijklmnopqrstu"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_TEST = "rk_test_" + "51Hx4eC39HqLyjWDarjtT1zdp7dc"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nabc+/==\n-----END RSA PRIVATE KEY-----"


def _found(kind: str, text: str) -> list[str]:
    return [text[a:b] for a, b, _ in secrets.format_finder(kind)(text)]


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("openai_key", OPENAI),
        ("openai_key", OPENAI_LEGACY),
        ("anthropic_key", ANTHROPIC),
        ("aws_access_key", AWS),
        ("github_token", GITHUB),
        ("github_token", GITHUB_FINE),
        ("slack_token", SLACK),
        ("slack_token", SLACK_HOOK),
        ("google_api_key", GOOGLE),
        ("stripe_key", STRIPE),
        ("stripe_key", STRIPE_TEST),
        ("jwt", JWT),
        ("private_key", PEM),
    ],
)
def test_formats_are_found_whole(kind: str, value: str) -> None:
    text = f'config = {{"value": "{value}"}} # end'
    assert _found(kind, text) == [value]


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("openai_key", "sk-this-is-not-a-key-at-all-really-no"),  # a phrase
        ("openai_key", "sk-short1A"),
        ("openai_key", ANTHROPIC),  # Anthropic's, not OpenAI's
        ("anthropic_key", "sk-ant-is-a-prefix-people-mention"),
        ("aws_access_key", "AKIAIOSFODNN7EXAMPL"),  # 19 characters
        ("aws_access_key", "XAKIAIOSFODNN7EXAMPLE"),  # inside a longer word
        ("github_token", "ghp_tooShort123"),
        ("slack_token", "xoxb-short"),
        ("google_api_key", "AIzaSyD-tooShort"),
        ("stripe_key", "pk_live_4eC39HqLyjWDarjtT1zdp7dc"),  # publishable: public
        ("jwt", "eyJhbGciOiJIUzI1NiJ9 and then nothing"),
        ("private_key", "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----"),
    ],
)
def test_look_alikes_are_left_alone(kind: str, text: str) -> None:
    assert _found(kind, text) == []


def test_private_key_without_end_goes_to_the_end_of_its_body() -> None:
    text = "here:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nabc=\n\nThanks!"
    (found,) = _found("private_key", text)
    assert found.startswith("-----BEGIN PRIVATE KEY-----") and found.endswith("abc=")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('api_key="Zx9Qw8Er7Ty6Ui5Op4As"', ["Zx9Qw8Er7Ty6Ui5Op4As"]),
        ("DB_PASSWORD=hX7#kq2Lm9Wv4Tz8", []),  # '#' ends the value: too short after it
        ("client_secret: 8f14e45fceea167a5a36dedd4bea2543", ["8f14e45fceea167a5a36dedd4bea2543"]),
        ('"access_token": "ya29.A0ARrdaM-7vPq3Xz"', ["ya29.A0ARrdaM-7vPq3Xz"]),
        # placeholders and words: not random
        ('password = "changeme-please-now"', []),
        ("token: <your-token-here>", []),
        ("api_key=YOUR_API_KEY_GOES_HERE", []),
        ("secret=aaaaaaaaaaaaaaaaaaaaaaaa1", []),  # one letter repeated: no entropy
        ("the token was 8f14e45fceea167a5a36dedd4bea2543", []),  # no assignment
    ],
)
def test_generic_secrets(text: str, expected: list[str]) -> None:
    assert [text[a:b] for a, b, _ in secrets.find_generic_secrets(text)] == expected


@pytest.mark.parametrize(
    "text", ["sk-" * 40_000, "AKIA" * 30_000, "eyJ" * 40_000, "api_key=" * 15_000, "xoxb-" * 30_000]
)
def test_scans_are_linear(text: str) -> None:
    for kind in secrets.SECRET_KINDS:
        secrets.format_finder(kind)(text)

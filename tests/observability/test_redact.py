"""The redaction processor: secret keys at any depth, credential-looking text in any string,
exception text included, and readable lines left alone."""

from __future__ import annotations

import json
import timeit
from collections.abc import MutableMapping
from typing import Any

import pytest
import structlog

from llmrelay.observability.redact import (
    REDACTED,
    is_secret_key,
    redact_processor,
    redact_text,
)

SECRET = "Zq8vT2mK9xLr4NwB7yHc"  # high-entropy, matches none of the patterns by itself


def _redact(**event: Any) -> MutableMapping[str, Any]:
    return redact_processor(None, "info", dict(event))


@pytest.mark.parametrize(
    "key",
    [
        "authorization",
        "Authorization",
        "proxy-authorization",
        "api_key",
        "api-key",
        "apikey",
        "apiKey",
        "x-api-key",
        "X-Goog-Api-Key",
        "secret",
        "client_secret",
        "password",
        "token",
        "access_token",
        "refresh_token",
        "admin_token",
        "accessToken",
        "cookie",
        "Set-Cookie",
        "credential",
        "credentials",
        "private_key",
        "session",
        "session_id",
    ],
)
def test_values_under_secret_keys_are_replaced(key: str) -> None:
    assert is_secret_key(key)
    assert _redact(event="e", **{key: SECRET})[key] == REDACTED


@pytest.mark.parametrize(
    "key",
    ["event", "request_id", "model", "provider", "error", "prompt_tokens", "max_tokens", "key_id"],
)
def test_ordinary_keys_are_kept(key: str) -> None:
    assert not is_secret_key(key)
    assert _redact(**{key: "plain value"})[key] == "plain value"


def test_secret_keys_are_found_at_any_depth_in_dicts_and_lists() -> None:
    headers = {"Authorization": f"Bearer {SECRET}", "accept": "application/json"}
    event = _redact(
        event="upstream_call",
        request={"headers": headers, "attempts": [{"x-api-key": SECRET, "status": 500}]},
        pairs=[("cookie", "fine"), {"password": SECRET}],
    )
    assert event["request"]["headers"] == {"Authorization": REDACTED, "accept": "application/json"}
    assert event["request"]["attempts"] == [{"x-api-key": REDACTED, "status": 500}]
    assert event["pairs"] == [["cookie", "fine"], {"password": REDACTED}]
    assert SECRET not in json.dumps(event)
    # the caller's objects are copied, not changed
    assert headers["Authorization"] == f"Bearer {SECRET}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"Authorization: Bearer {SECRET}", f"Authorization: Bearer {REDACTED}"),
        (f"authorization='basic {SECRET}'", f"authorization='basic {REDACTED}'"),
        (f"key sk-{SECRET} and sk-ant-api03-{SECRET}", f"key sk-{REDACTED} and sk-{REDACTED}"),
        (f"sk-proj-{SECRET}.", f"sk-{REDACTED}."),
        (f"google AIzaSy{SECRET}xyz1234", f"google AIza{REDACTED}"),
        (
            f"GET https://h/v1beta/models/m:streamGenerateContent?alt=sse&key={SECRET} HTTP/1.1",
            f"GET https://h/v1beta/models/m:streamGenerateContent?alt=sse&key={REDACTED} HTTP/1.1",
        ),
        (
            f"https://h/x?api-key={SECRET}&model=m&access_token={SECRET}#f",
            f"https://h/x?api-key={REDACTED}&model=m&access_token={REDACTED}#f",
        ),
        (f"postgresql://user:{SECRET}@db:5432/x", f"postgresql://user:{REDACTED}@db:5432/x"),
        (f"api_key={SECRET}", f"api_key={REDACTED}"),
        (f"x-goog-api-key: {SECRET}", f"x-goog-api-key: {REDACTED}"),
        (f"{{'apikey': '{SECRET}'}}", f"{{'apikey': '{REDACTED}'}}"),
        (f'"password": "{SECRET}"', f'"password": "{REDACTED}"'),
        (f"(b'x-api-key', b'{SECRET}')", f"(b'x-api-key', b'{REDACTED}')"),
        (f"Cookie: a=1; session={SECRET}", f"Cookie: {REDACTED}"),
        (f"set-cookie: sid={SECRET}; Path=/", f"set-cookie: {REDACTED}"),
        (f"İstanbul Bearer {SECRET}", f"İstanbul Bearer {REDACTED}"),  # lower() changes length
    ],
)
def test_credential_looking_text_is_masked_in_strings(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert _redact(event=text)["event"] == expected
    assert SECRET not in expected


@pytest.mark.parametrize(
    "text",
    [
        "stream_failed",
        "connection lost while reading: cannot connect (Connection refused)",
        "max_tokens=1024 prompt_tokens: 12 completion_tokens=3",
        "task-runner-12345678 disk-usage-warning",  # `sk-` inside a word is not a key
        "the model answered with 3 tokens",
        "2026-12-01T10:16:38.411296Z",
    ],
)
def test_text_without_credentials_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_nothing_of_a_secret_is_kept() -> None:
    masked = redact_text(f"Bearer {SECRET} sk-{SECRET} AIza{SECRET}")
    assert all(SECRET[-n:] not in masked for n in range(4, len(SECRET)))


def test_exception_text_is_masked_after_it_is_formatted() -> None:
    try:
        raise RuntimeError(f"upstream refused Authorization: Bearer sk-{SECRET}")
    except RuntimeError:
        event: MutableMapping[str, Any] = {"event": "unhandled_error", "exc_info": True}
        event = structlog.processors.format_exc_info(None, "error", event)
        assert SECRET in event["exception"]  # the traceback, as it was rendered
        event = redact_processor(None, "error", event)
    assert SECRET not in event["exception"]
    assert "Traceback (most recent call last)" in event["exception"]
    assert "RuntimeError: upstream refused Authorization: Bearer [REDACTED]" in event["exception"]


def test_objects_are_masked_as_the_renderer_would_show_them() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return f"Opaque(token={SECRET})"

    event = _redact(event="e", thing=Opaque(), raw=f"sk-{SECRET}".encode(), count=3, ok=None)
    assert event["thing"] == f"Opaque(token={REDACTED})"
    assert SECRET not in event["raw"]
    assert (event["count"], event["ok"]) == (3, None)


def test_a_pass_over_text_without_credentials_is_cheap() -> None:
    """One regex pass per string: well under 10 us for a typical error text even on a busy
    machine (about 1 us measured; the bound only catches a pathological pattern)."""
    text = "connection lost while reading: cannot connect (Connection refused)"
    runs = 2000
    best = min(timeit.repeat(lambda: redact_text(text), number=runs, repeat=5)) / runs
    assert best < 10e-6

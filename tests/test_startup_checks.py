"""Production refuses guessable secrets and unsafe CORS, naming the setting, never the value;
development only warns."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest
import structlog

from llmrelay.settings import Environment, Settings, SettingsError
from llmrelay.startup_checks import Setting, check_settings, enforce, placeholder_reason

PROD = Environment.PRODUCTION
GOOD = secrets.token_urlsafe(48)
ROOT = Path(__file__).resolve().parents[1]


def _problems(**values: object) -> dict[str, str]:
    settings = Settings(env=PROD, **{"secret_key": GOOD, **values})  # type: ignore[arg-type]
    return {p.setting.value: p.problem for p in check_settings(settings)}


def test_a_strong_configuration_passes() -> None:
    assert _problems() == {}
    assert (
        _problems(
            admin_token=secrets.token_hex(32),
            metrics_token=secrets.token_urlsafe(32),
            bootstrap_admin_password="Tr0ub4dor&3-horse",
            cors_origins="https://console.example.com",
        )
        == {}
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "is not set"),
        ("", "is not set"),
        ("short-but-random-Zq81", "too short: 21 bytes, at least 32"),
        ("changeme" * 5, "placeholder"),
        ("Change-Me-Now-Please-Before-Prod-2026", "placeholder"),
        ("this-is-my-production-secret-value-xyz", "placeholder"),
        ("password" + "3f9c1a7e5b2d4086" * 2, "placeholder"),
        ("x" * 40, "distinct characters"),
        ("ab" * 20, "distinct characters"),
    ],
)
def test_the_secret_key_must_be_set_long_and_not_a_placeholder(
    value: str | None, problem: str
) -> None:
    found = _problems(secret_key=value)
    assert list(found) == ["LLMRELAY_SECRET_KEY"]
    assert problem in found["LLMRELAY_SECRET_KEY"]


@pytest.mark.parametrize("field", ["admin_token", "metrics_token"])
def test_tokens_when_set_are_held_to_the_same_rules(field: str) -> None:
    name = f"LLMRELAY_{field.upper()}"
    assert "too short" in _problems(**{field: "tok-1234"})[name]
    assert "placeholder" in _problems(**{field: "example-token-" + "k" * 20 + "Zq7"})[name]
    assert _problems(**{field: secrets.token_urlsafe(32)}) == {}


def test_the_bootstrap_password_needs_twelve_characters() -> None:
    name = "LLMRELAY_BOOTSTRAP_ADMIN_PASSWORD"
    assert (
        "too short: 11 characters, at least 12"
        in _problems(bootstrap_admin_password="Xk3#pq9!Lm2")[name]
    )
    assert "placeholder" in _problems(bootstrap_admin_password="changeme-changeme")[name]
    assert _problems(bootstrap_admin_password="Xk3#pq9!Lm2z") == {}


def test_cors_everyone_with_credentials_is_refused_but_either_alone_is_not() -> None:
    assert "credentials" in _problems(cors_origins="*")["LLMRELAY_CORS_ORIGINS"]
    assert _problems(cors_origins="*", cors_allow_credentials=False) == {}
    assert _problems(cors_origins="https://a.example", cors_allow_credentials=True) == {}


def test_mail_needs_a_public_url_and_never_logs_its_links() -> None:
    assert "development only" in _problems(mail_log=True)["LLMRELAY_MAIL_LOG"]
    smtp = "smtps://relay:pw@mail.example:465"
    assert "base URL" in _problems(smtp_url=smtp)["LLMRELAY_PUBLIC_URL"]
    assert "LLMRELAY_PUBLIC_URL" in _problems(signup_enabled=True)
    assert _problems(smtp_url=smtp, public_url="https://console.example.com/") == {}


def test_mail_urls_are_checked_when_read() -> None:
    with pytest.raises(ValueError, match="LLMRELAY_SMTP_URL"):
        Settings(smtp_url="mail.example:25")
    with pytest.raises(ValueError, match="LLMRELAY_PUBLIC_URL"):
        Settings(public_url="console.example.com")
    assert Settings(public_url="https://console.example.com/app/").public_url == (
        "https://console.example.com/app"
    )
    assert Settings(smtp_url=" ").smtp_url is None


def test_a_command_is_checked_only_for_the_settings_it_uses() -> None:
    settings = Settings(env=PROD, admin_token="short")
    assert [p.setting for p in check_settings(settings)] == [
        Setting.SECRET_KEY,
        Setting.ADMIN_TOKEN,
    ]
    assert [p.setting for p in check_settings(settings, {Setting.SECRET_KEY})] == [
        Setting.SECRET_KEY
    ]
    assert check_settings(settings, ()) == []


def test_production_refuses_with_every_problem_named_and_no_value() -> None:
    weak_key, weak_token = "changeme-changeme-changeme-changeme", "hunter2"
    settings = Settings(env=PROD, secret_key=weak_key, admin_token=weak_token)
    with pytest.raises(SettingsError) as caught:
        enforce(settings)
    message = str(caught.value)
    assert "LLMRELAY_SECRET_KEY" in message and "LLMRELAY_ADMIN_TOKEN" in message
    assert weak_key not in message and weak_token not in message


def test_development_warns_and_carries_on() -> None:
    settings = Settings(secret_key="dev", admin_token="dev-token")
    with structlog.testing.capture_logs() as logs:
        enforce(settings)
    assert [(e["event"], e["setting"]) for e in logs] == [
        ("weak_setting", "LLMRELAY_SECRET_KEY"),
        ("weak_setting", "LLMRELAY_ADMIN_TOKEN"),
    ]
    assert all(e["log_level"] == "warning" for e in logs)
    assert "dev-token" not in repr(logs)
    with structlog.testing.capture_logs() as logs:
        enforce(Settings())  # no key in development: one is generated, nothing to say
    assert logs == []


def test_random_values_are_not_mistaken_for_placeholders() -> None:
    for _ in range(2000):
        assert placeholder_reason(secrets.token_urlsafe(32)) is None
        assert placeholder_reason(secrets.token_hex(32)) is None


_SHOWN = re.compile(
    r"LLMRELAY_(?:SECRET_KEY|PREVIOUS_SECRET_KEY|ADMIN_TOKEN|METRICS_TOKEN)=([^\s`'\"$<]+)"
)


def test_every_secret_shown_in_the_docs_is_refused() -> None:
    """A value copied from README.md or docs/ must not pass: the rules catch it, or it is
    listed in startup_checks._DOCUMENTED_EXAMPLES."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    shown = {m.group(1) for f in files for m in _SHOWN.finditer(f.read_text())}
    accepted = {v for v in shown if len(v.encode()) >= 32 and placeholder_reason(v) is None}
    assert accepted == set()

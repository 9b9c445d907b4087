"""Start-up safety: refuse to run production with secrets an attacker could guess.

`check_settings` lists what is wrong with the settings a command uses; `enforce` refuses to
continue in production (`LLMRELAY_ENV=production`) and only warns in development, where a
quick local try must keep working without any set-up. The CLI calls `enforce` once per
command, before it touches the database or listens on a port.

Messages name the environment variable and the rule it breaks, never the value: they end up
in terminals, CI logs and crash reports.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

import structlog

from llmrelay.settings import SECRET_KEY_MIN_BYTES, Environment, Settings, SettingsError

log = structlog.get_logger(__name__)

#: The shortest bootstrap console password production accepts (characters).
BOOTSTRAP_PASSWORD_MIN_CHARS = 12
#: A secret with fewer distinct characters than this is a pattern, not randomness (a
#: random 32-byte value has far more: hex has 16, base64 about 25 in 43 characters).
_MIN_DISTINCT_CHARS = 8
#: Words that mark a value someone typed instead of generating; matched in the value folded
#: to lower case without separators, so "Change-Me" and "change_me" match "changeme". All
#: at least five letters, so that a random value contains one by chance about once in a
#: million draws, not once in ten thousand.
_PLACEHOLDER_WORDS = (
    "changeme",
    "replaceme",
    "changethis",
    "secret",
    "password",
    "passwd",
    "example",
    "placeholder",
    "dummy",
    "insecure",
    "default",
    "sample",
    "yourkey",
    "yourtoken",
    "12345678",
    "abcdefgh",
    "qwerty",
)
#: Whole values shown in README.md or docs/ as examples that the rules above would not catch
#: (compared exactly, so a value copied from the docs is refused even if it looks random).
#: Empty: the docs show how to generate a value, never one; tests/test_startup_checks.py
#: fails when a doc shows a literal secret that these checks would accept.
_DOCUMENTED_EXAMPLES: frozenset[str] = frozenset()
_SEPARATORS = re.compile(r"[\s\-_.:/]+")


class Setting(StrEnum):
    """The settings the checks look at, by environment variable name."""

    SECRET_KEY = "LLMRELAY_SECRET_KEY"
    ADMIN_TOKEN = "LLMRELAY_ADMIN_TOKEN"
    METRICS_TOKEN = "LLMRELAY_METRICS_TOKEN"
    BOOTSTRAP_ADMIN_PASSWORD = "LLMRELAY_BOOTSTRAP_ADMIN_PASSWORD"
    CORS = "LLMRELAY_CORS_ORIGINS"
    MAIL_LOG = "LLMRELAY_MAIL_LOG"
    PUBLIC_URL = "LLMRELAY_PUBLIC_URL"


#: What `serve` uses: everything.
ALL_SETTINGS: frozenset[Setting] = frozenset(Setting)


@dataclass(frozen=True)
class Problem:
    setting: Setting
    problem: str

    def __str__(self) -> str:
        return f"{self.setting.value} {self.problem}"


def placeholder_reason(value: str) -> str | None:
    """Why `value` looks typed rather than generated, or None."""
    if value in _DOCUMENTED_EXAMPLES:
        return "is the example value from the documentation"
    if len(set(value)) < _MIN_DISTINCT_CHARS:
        return f"has fewer than {_MIN_DISTINCT_CHARS} distinct characters (a placeholder?)"
    folded = _SEPARATORS.sub("", value.lower())
    if any(word in folded for word in _PLACEHOLDER_WORDS):
        return "looks like a placeholder (contains a word such as 'changeme' or 'secret')"
    return None


def _token_problem(setting: Setting, value: str) -> Problem | None:
    size = len(value.encode())
    if size < SECRET_KEY_MIN_BYTES:
        return Problem(setting, f"is too short: {size} bytes, at least {SECRET_KEY_MIN_BYTES}")
    reason = placeholder_reason(value)
    return Problem(setting, reason) if reason else None


def check_settings(settings: Settings, uses: Collection[Setting] = ALL_SETTINGS) -> list[Problem]:
    """Every problem with the settings in `uses` (the ones the command relies on)."""
    problems: list[Problem | None] = []
    if Setting.SECRET_KEY in uses:
        if not settings.secret_key:
            if settings.env is Environment.PRODUCTION:  # development generates one
                problems.append(Problem(Setting.SECRET_KEY, "is not set"))
        else:
            problems.append(_token_problem(Setting.SECRET_KEY, settings.secret_key))
    if Setting.ADMIN_TOKEN in uses and settings.admin_token is not None:
        problems.append(_token_problem(Setting.ADMIN_TOKEN, settings.admin_token))
    if Setting.METRICS_TOKEN in uses and settings.metrics_token is not None:
        problems.append(_token_problem(Setting.METRICS_TOKEN, settings.metrics_token))
    password = settings.bootstrap_admin_password
    if Setting.BOOTSTRAP_ADMIN_PASSWORD in uses and password is not None:
        if len(password) < BOOTSTRAP_PASSWORD_MIN_CHARS:
            problems.append(
                Problem(
                    Setting.BOOTSTRAP_ADMIN_PASSWORD,
                    f"is too short: {len(password)} characters, "
                    f"at least {BOOTSTRAP_PASSWORD_MIN_CHARS}",
                )
            )
        elif reason := placeholder_reason(password):
            problems.append(Problem(Setting.BOOTSTRAP_ADMIN_PASSWORD, reason))
    if Setting.CORS in uses and "*" in settings.cors_origins and settings.cors_credentials:
        problems.append(
            Problem(
                Setting.CORS,
                "allows every origin (*) with credentials (LLMRELAY_CORS_ALLOW_CREDENTIALS): "
                "any web site could act with a signed-in user's session; list the origins",
            )
        )
    if Setting.MAIL_LOG in uses and settings.mail_log:
        problems.append(
            Problem(
                Setting.MAIL_LOG,
                "is on: it writes mails, their sign-in and reset links included, to the "
                "log (development only)",
            )
        )
    mails_links = settings.smtp_url is not None or settings.signup_enabled
    if Setting.PUBLIC_URL in uses and mails_links and settings.public_url is None:
        problems.append(
            Problem(
                Setting.PUBLIC_URL,
                "is not set: mails (LLMRELAY_SMTP_URL, LLMRELAY_SIGNUP_ENABLED) carry links "
                "to the console, which need its base URL",
            )
        )
    return [p for p in problems if p is not None]


def enforce(settings: Settings, uses: Collection[Setting] = ALL_SETTINGS) -> None:
    """Production: raise SettingsError listing every problem. Development: log each one as a
    warning and carry on."""
    problems = check_settings(settings, uses)
    if not problems:
        return
    if settings.env is Environment.PRODUCTION:
        lines = "\n".join(f"  {problem}" for problem in problems)
        raise SettingsError(f"refusing to start with LLMRELAY_ENV=production:\n{lines}")
    for problem in problems:
        log.warning(
            "weak_setting",
            setting=problem.setting.value,
            problem=problem.problem,
            note="refused when LLMRELAY_ENV=production",
        )

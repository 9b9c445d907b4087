"""Credential detectors: API keys and tokens in the formats their issuers document, private
key blocks, JSON Web Tokens, and high-entropy values assigned to secret-sounding names.

Each format is anchored on its fixed prefix (`sk-proj-`, `AKIA`, `ghp_`...), so a scan
costs little where no prefix occurs; every quantifier is bounded. The generic detector is
the only one that guesses: it takes a value after a name like `api_key=` or `"token":` only
when the value looks random (mixed characters, Shannon entropy of 3 bits a character or
more), so `password = "changeme"` and `token: <your token here>` are left alone.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Final

from llmrelay.guardrails.spans import Finder, Span

#: kind -> the pattern of one credential format (the whole match is the secret).
_FORMATS: Final = {
    # OpenAI: sk-proj-..., sk-svcacct-..., sk-admin-..., and the older sk-<48 characters>
    "openai_key": r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,300}",
    # Anthropic: sk-ant-api03-..., sk-ant-admin01-...
    "anthropic_key": r"sk-ant-[a-z]{2,10}\d{2}-[A-Za-z0-9_-]{20,300}",
    # AWS access key ids (long-term AKIA, temporary ASIA, and the other documented prefixes)
    "aws_access_key": r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}",
    # GitHub: classic tokens (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained github_pat_
    "github_token": r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{60,255})",
    # Slack: bot, user, app-level and other tokens, and incoming webhook URLs
    "slack_token": (
        r"(?:xox[abposr]-[A-Za-z0-9-]{10,250}|xapp-\d-[A-Za-z0-9-]{10,250}"
        r"|https://hooks\.slack\.com/services/T[A-Za-z0-9_]{6,20}/B[A-Za-z0-9_]{6,20}"
        r"/[A-Za-z0-9_]{16,40})"
    ),
    # Google API keys
    "google_api_key": r"AIza[0-9A-Za-z_-]{35}",
    # Stripe secret and restricted keys (live and test) and webhook signing secrets;
    # publishable keys (pk_) are public by design and left alone
    "stripe_key": r"(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,250}|whsec_[0-9A-Za-z]{24,250})",
    # JSON Web Tokens: base64url JSON header and payload ({"... is eyJ), then a signature
    "jwt": r"eyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,8000}\.[A-Za-z0-9_-]{0,2000}",
}
#: Kinds whose random part must look random: a hyphenated phrase after `sk-` is prose.
_NEEDS_MIXED: Final = frozenset({"openai_key", "anthropic_key"})

_BOUNDED: Final = {
    kind: re.compile(rf"(?<![A-Za-z0-9_-])(?:{pattern})(?![A-Za-z0-9_-])")
    for kind, pattern in _FORMATS.items()
}
_AWS_PREFIXES: Final = (
    *("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA"),
)
#: A cheap test before each pattern: the text holds its fixed prefix.
_PREFIXES: Final = {
    "openai_key": ("sk-",),
    "anthropic_key": ("sk-ant-",),
    "aws_access_key": _AWS_PREFIXES,
    "github_token": ("gh", "github_pat_"),
    "slack_token": ("xox", "xapp-", "hooks.slack.com"),
    "google_api_key": ("AIza",),
    "stripe_key": ("_live_", "_test_", "whsec_"),
    "jwt": ("eyJ",),
}

_PEM_BEGIN: Final = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ ){0,4})PRIVATE KEY-----")
#: The lines of a PEM body: base64 (up to 100 characters a line) or `Name: value` headers,
#: each on its own line; a blank line or anything else ends it.
_PEM_BODY: Final = re.compile(
    r"(?:[ \t]*\r?\n[ \t]*(?:[A-Za-z0-9+/]{1,100}={0,2}|[A-Za-z-]{1,40}: [^\n]{0,200})"
    r"(?=[ \t]*(?:\r?\n|$))){0,500}"
)

_ASSIGNMENT: Final = re.compile(
    r"(?i)(?<![A-Za-z0-9])"
    r"(?:api[_-]?key|api[_-]?secret|secret[_-]?key|client[_-]?secret|access[_-]?key"
    r"|access[_-]?token|auth[_-]?token|refresh[_-]?token|private[_-]?key|secret|token"
    r"|password|passwd|pwd)"
    r"[\"']?[ \t]{0,4}[:=][ \t]{0,4}[\"']?"
    r"([A-Za-z0-9_./+=~-]{16,300})"
)

#: Every name `_ASSIGNMENT` knows holds one of these.
_NAME_WORDS: Final = ("key", "secret", "token", "pass", "pwd")

SECRET_KINDS: Final = (*_FORMATS, "private_key", "generic_secret")


def format_finder(kind: str) -> Finder:
    """The detector of one credential format."""
    if kind == "private_key":
        return find_private_keys
    if kind == "generic_secret":
        return find_generic_secrets
    pattern = _BOUNDED[kind]
    prefixes = _PREFIXES[kind]
    mixed = kind in _NEEDS_MIXED

    def find(text: str) -> list[Span]:
        if not any(prefix in text for prefix in prefixes):
            return []
        return [
            (m.start(), m.end(), kind)
            for m in pattern.finditer(text)
            if not mixed or _mixed(m.group())
        ]

    return find


def find_private_keys(text: str) -> list[Span]:
    """A PEM private key block from its BEGIN line to its END line; without an END line
    (a block cut short), to the end of the base64 body that follows."""
    if "PRIVATE KEY-----" not in text:
        return []
    found: list[Span] = []
    position = 0
    while True:
        begin = _PEM_BEGIN.search(text, position)
        if begin is None:
            return found
        marker = f"-----END {begin.group(1)}PRIVATE KEY-----"
        end = text.find(marker, begin.end())
        if end >= 0:
            stop = end + len(marker)
        else:
            body = _PEM_BODY.match(text, begin.end())
            stop = body.end() if body is not None else begin.end()
        found.append((begin.start(), stop, "private_key"))
        position = stop


def find_generic_secrets(text: str) -> list[Span]:
    """The value (only the value) of `api_key=...`, `"client_secret": "..."`,
    `password: ...` and the like, when it looks random."""
    lowered = text.lower()
    if not any(word in lowered for word in _NAME_WORDS):
        return []  # the pattern begins with a lookbehind: worth avoiding in most text
    found: list[Span] = []
    for match in _ASSIGNMENT.finditer(text):
        value = match.group(1)
        if looks_random(value):
            found.append((match.start(1), match.end(1), "generic_secret"))
    return found


def looks_random(value: str) -> bool:
    """Letters and digits mixed (or upper and lower case in a long value), not a template
    placeholder, and at least 3 bits of Shannon entropy a character."""
    has_digit = any(c.isdigit() for c in value)
    has_upper = any(c.isupper() for c in value)
    has_lower = any(c.islower() for c in value)
    if not ((has_digit and (has_upper or has_lower)) or (has_upper and has_lower)):
        return False
    return entropy(value) >= 3.0


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    size = len(value)
    return -sum(n / size * math.log2(n / size) for n in Counter(value).values())


def _mixed(token: str) -> bool:
    """The random part of a key: digits and letters of both cases, as keys have (a phrase
    such as `sk-this-is-not-a-key-at-all` has no digit and no capital)."""
    return (
        any(c.isdigit() for c in token)
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
    )

"""API keys: generation, the digest we store, and the parts we may display.

Only the SHA-256 digest of a key is stored; the key is shown once when it is created.
A key given in configuration may have any shape of at least MIN_KEY_LENGTH characters.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

KEY_PREFIX = "sk-lr-"
MIN_KEY_LENGTH = 20
_DISPLAY_PREFIX_CHARS = 10


@dataclass(frozen=True, slots=True)
class KeyDisplay:
    prefix: str
    last_four: str


def generate_key() -> str:
    """A new key: a recognisable prefix and 256 bits of randomness."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def display(key: str) -> KeyDisplay:
    return KeyDisplay(prefix=key[:_DISPLAY_PREFIX_CHARS], last_four=key[-4:])

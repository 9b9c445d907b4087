"""API keys: generation, the digest we store, and the parts we may display.

Only the SHA-256 digest of a key is stored; the key is shown once when it is created.
A key given in configuration may have any shape of at least MIN_KEY_LENGTH characters.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Final, Literal, get_args

KEY_PREFIX = "sk-lr-"
MIN_KEY_LENGTH = 20
_DISPLAY_PREFIX_CHARS = 10

#: The APIs a key's scopes may name, one per family of data-plane routes (docs/security.md,
#: "Key scopes"). A key with no scopes (null) may call every one of them.
Scope = Literal[
    "chat",
    "responses",
    "messages",
    "embeddings",
    "generate",
    "models",
    "gemini-native",
    "images",
]
SCOPES: Final[tuple[str, ...]] = get_args(Scope)
#: POST /v1/chat/completions
CHAT: Final = "chat"
#: POST /v1/responses, /v1/responses/compact; GET /v1/responses/{id}, POST .../cancel
RESPONSES: Final = "responses"
#: POST /v1/messages, /v1/messages/count_tokens
MESSAGES: Final = "messages"
#: POST /v1/embeddings
EMBEDDINGS: Final = "embeddings"
#: POST /v1/generate, GET /v1/generate/{id}
GENERATE: Final = "generate"
#: GET /v1/models (OpenAI's and Anthropic's list)
MODELS: Final = "models"
#: POST /v1/images/generations
IMAGES: Final = "images"
#: every path under /v1beta/ (Gemini's own API, its model list included)
GEMINI_NATIVE: Final = "gemini-native"


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

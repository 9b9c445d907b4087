"""Sealing provider credentials with AES-GCM under LLMRELAY_SECRET_KEY.

A sealed value is `v1.<key_id>.<base64url(nonce || ciphertext)>`. The key id (a short hash
of the derived key) is stored with each row so a later rotation can tell which key sealed it.
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_NONCE_BYTES = 12
_VERSION = "v1"


class CredentialError(ValueError):
    """A sealed credential cannot be opened with the configured secret key."""


class Sealer:
    def __init__(self, secret_key: str) -> None:
        key = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=b"llmrelay",
            info=b"llmrelay credentials v1",
        ).derive(secret_key.encode())
        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(key).hexdigest()[:12]

    def seal(self, plaintext: bytes, *, context: str) -> str:
        """Encrypt; `context` (for example the provider id) is bound as associated data."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, context.encode())
        blob = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f"{_VERSION}.{self.key_id}.{blob}"

    def open(self, sealed: str, *, context: str) -> bytes:
        try:
            version, key_id, blob = sealed.split(".", 2)
        except ValueError as exc:
            raise CredentialError("sealed credential is malformed") from exc
        if version != _VERSION:
            raise CredentialError(f"unknown sealed credential version {version!r}")
        if key_id != self.key_id:
            raise CredentialError(
                f"credential was sealed with key {key_id}, not the configured key "
                f"{self.key_id}: LLMRELAY_SECRET_KEY changed"
            )
        raw = base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4))
        try:
            return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode())
        except InvalidTag as exc:
            raise CredentialError("sealed credential failed authentication") from exc

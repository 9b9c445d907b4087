"""Sealing secrets at rest (provider credentials, ...) with AES-GCM under LLMRELAY_SECRET_KEY.

AES-GCM and HKDF come from the interpreter's own libcrypto (store/aead.py: why). A sealed
value is `v1.<key_id>.<base64url(nonce || ciphertext)>`. The key id (a short hash
of the derived key) travels with each value, so a Sealer that knows several keys can tell
which one sealed it: during a rotation (`llmrelay rotate-secret`, store/rotation.py) values
sealed under the previous key still open, while every new value is sealed under the current
one. The context (for example the provider id) is bound as associated data, so a sealed value
copied onto another row does not open there.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable

from llmrelay.settings import Settings, resolve_secret_key
from llmrelay.store.aead import Aead, InvalidTagError, aes_gcm, hkdf_sha256

_NONCE_BYTES = 12
_VERSION = "v1"


class CredentialError(ValueError):
    """A sealed value cannot be opened with the configured secret keys."""


class UnknownKeyError(CredentialError):
    """The value was sealed under a key this Sealer was not given."""

    def __init__(self, key_id: str, known: Iterable[str]) -> None:
        self.key_id = key_id
        super().__init__(
            f"credential was sealed with key {key_id}, not the configured key(s) "
            f"{', '.join(known)}: LLMRELAY_SECRET_KEY changed (give the old one as "
            "LLMRELAY_PREVIOUS_SECRET_KEY and run `llmrelay rotate-secret`)"
        )


def _derive(secret_key: str) -> tuple[str, Aead]:
    key = hkdf_sha256(secret_key.encode(), salt=b"llmrelay", info=b"llmrelay credentials v1")
    return hashlib.sha256(key).hexdigest()[:12], aes_gcm(key)


def key_id_of(sealed: str) -> str:
    """The id of the key that sealed `sealed` (raises CredentialError when malformed)."""
    return _split(sealed)[1]


def _split(sealed: str) -> tuple[str, str, str]:
    try:
        version, key_id, blob = sealed.split(".", 2)
    except ValueError as exc:
        raise CredentialError("sealed credential is malformed") from exc
    if version != _VERSION:
        raise CredentialError(f"unknown sealed credential version {version!r}")
    return version, key_id, blob


class Sealer:
    """Seals under the current key; opens under the current key or any previous one."""

    def __init__(self, secret_key: str, previous_keys: Iterable[str] = ()) -> None:
        self.key_id, self._aead = _derive(secret_key)
        self._keys: dict[str, Aead] = {self.key_id: self._aead}
        for previous in previous_keys:
            key_id, aead = _derive(previous)
            self._keys.setdefault(key_id, aead)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id this Sealer can open, the current one first."""
        return tuple(self._keys)

    def seal(self, plaintext: bytes, *, context: str) -> str:
        """Encrypt under the current key with a fresh nonce; `context` is associated data."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, context.encode())
        blob = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f"{_VERSION}.{self.key_id}.{blob}"

    def open(self, sealed: str, *, context: str) -> bytes:
        _, key_id, blob = _split(sealed)
        aead = self._keys.get(key_id)
        if aead is None:
            raise UnknownKeyError(key_id, self._keys)
        raw = base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4))
        try:
            return aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode())
        except InvalidTagError as exc:
            raise CredentialError("sealed credential failed authentication") from exc

    def reseal(self, sealed: str, *, context: str) -> str | None:
        """`sealed` sealed again under the current key, or None when it already is."""
        if key_id_of(sealed) == self.key_id:
            return None
        return self.seal(self.open(sealed, context=context), context=context)


def sealer_for(settings: Settings, previous_keys: Iterable[str] = ()) -> Sealer:
    """The Sealer every process builds: the current key (generated in development), plus
    LLMRELAY_PREVIOUS_SECRET_KEY and any `previous_keys`, which open but never seal."""
    previous = [*previous_keys]
    if settings.previous_secret_key:
        previous.append(settings.previous_secret_key)
    return Sealer(resolve_secret_key(settings), previous)

"""AES-256-GCM and HKDF-SHA256 for sealed values, from the OpenSSL the interpreter already has.

Why not `cryptography` here: its Rust extension carries an OpenSSL of its own, 6.8 MiB of
resident memory in every serving process, which needs AES-GCM only to open provider
credentials when it builds its snapshot (issue 36: a serve process's peak is bounded at
100 MiB). Python's `_hashlib` is linked against the system's libcrypto, which is therefore
mapped already; its EVP cipher functions are reached through `_hashlib`'s own handle
(`dlsym` on a library's handle also searches the libraries it needs), so the very libcrypto
`hashlib` uses does the work, through its high-level EVP interface only.

Where that is not available (a Python whose `_hashlib` cannot be opened with ctypes, as on
Windows), `cryptography`'s AESGCM is used: the same algorithm, so values sealed by either
open with the other (tests/store/test_aead.py checks both against each other).
"""

from __future__ import annotations

import ctypes
import hmac
from typing import Any, Protocol

TAG_BYTES = 16
KEY_BYTES = 32
NONCE_BYTES = 12

# EVP_CIPHER_CTX_ctrl's AEAD commands (openssl/evp.h; the same values in 1.1 and 3).
_CTRL_GET_TAG = 0x10
_CTRL_SET_TAG = 0x11


class InvalidTagError(ValueError):
    """The value, its nonce or its associated data is not what was sealed under this key."""


class Aead(Protocol):
    def encrypt(self, nonce: bytes, data: bytes, associated: bytes) -> bytes: ...
    def decrypt(self, nonce: bytes, data: bytes, associated: bytes) -> bytes: ...


def hkdf_sha256(secret: bytes, *, salt: bytes, info: bytes, length: int = KEY_BYTES) -> bytes:
    """RFC 5869 HKDF with SHA-256 (one or more output blocks)."""
    prk = hmac.digest(salt, secret, "sha256")
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(prk, block + info + bytes([counter]), "sha256")
        out += block
        counter += 1
    return out[:length]


def _bind(library: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the EVP functions' signatures (raises AttributeError when one is missing)."""
    p, i, c = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "EVP_CIPHER_CTX_new": (p, []),
        "EVP_CIPHER_CTX_free": (None, [p]),
        "EVP_aes_256_gcm": (p, []),
        "EVP_EncryptInit_ex": (i, [p, p, p, c, c]),
        "EVP_DecryptInit_ex": (i, [p, p, p, c, c]),
        "EVP_EncryptUpdate": (i, [p, p, ctypes.POINTER(i), c, i]),
        "EVP_DecryptUpdate": (i, [p, p, ctypes.POINTER(i), c, i]),
        "EVP_EncryptFinal_ex": (i, [p, p, ctypes.POINTER(i)]),
        "EVP_DecryptFinal_ex": (i, [p, p, ctypes.POINTER(i)]),
        "EVP_CIPHER_CTX_ctrl": (i, [p, i, i, p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(library, name)
        function.restype, function.argtypes = restype, argtypes
    return library


def _system_libcrypto() -> ctypes.CDLL | None:
    try:
        import _hashlib

        return _bind(ctypes.CDLL(_hashlib.__file__))
    except (ImportError, OSError, AttributeError):
        return None


class _SystemAesGcm:
    """AES-256-GCM with a 12-byte nonce and a 16-byte tag appended to the ciphertext: the
    layout of `cryptography`'s AESGCM. A cipher context per call, so threads may share it."""

    def __init__(self, library: ctypes.CDLL, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError("AES-256-GCM needs a 32-byte key")
        self._lib, self._key = library, key

    def encrypt(self, nonce: bytes, data: bytes, associated: bytes) -> bytes:
        lib = self._lib
        _check_nonce(nonce)
        ctx = lib.EVP_CIPHER_CTX_new()
        if not ctx:
            raise MemoryError("EVP_CIPHER_CTX_new")
        try:
            out = ctypes.create_string_buffer(len(data) + TAG_BYTES)
            written = ctypes.c_int(0)
            _ok(lib.EVP_EncryptInit_ex(ctx, lib.EVP_aes_256_gcm(), None, self._key, nonce))
            _ok(
                lib.EVP_EncryptUpdate(ctx, None, ctypes.byref(written), associated, len(associated))
            )
            _ok(lib.EVP_EncryptUpdate(ctx, out, ctypes.byref(written), data, len(data)))
            total = written.value
            _ok(lib.EVP_EncryptFinal_ex(ctx, ctypes.byref(out, total), ctypes.byref(written)))
            total += written.value
            tag = ctypes.create_string_buffer(TAG_BYTES)
            _ok(lib.EVP_CIPHER_CTX_ctrl(ctx, _CTRL_GET_TAG, TAG_BYTES, tag))
            return out.raw[:total] + tag.raw
        finally:
            lib.EVP_CIPHER_CTX_free(ctx)

    def decrypt(self, nonce: bytes, data: bytes, associated: bytes) -> bytes:
        lib = self._lib
        _check_nonce(nonce)
        if len(data) < TAG_BYTES:
            raise InvalidTagError("sealed value shorter than its tag")
        body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
        ctx = lib.EVP_CIPHER_CTX_new()
        if not ctx:
            raise MemoryError("EVP_CIPHER_CTX_new")
        try:
            out = ctypes.create_string_buffer(len(body) + TAG_BYTES)
            written = ctypes.c_int(0)
            _ok(lib.EVP_DecryptInit_ex(ctx, lib.EVP_aes_256_gcm(), None, self._key, nonce))
            _ok(
                lib.EVP_DecryptUpdate(ctx, None, ctypes.byref(written), associated, len(associated))
            )
            _ok(lib.EVP_DecryptUpdate(ctx, out, ctypes.byref(written), body, len(body)))
            total = written.value
            tag_buffer = ctypes.create_string_buffer(tag, TAG_BYTES)
            _ok(lib.EVP_CIPHER_CTX_ctrl(ctx, _CTRL_SET_TAG, TAG_BYTES, tag_buffer))
            if lib.EVP_DecryptFinal_ex(ctx, ctypes.byref(out, total), ctypes.byref(written)) <= 0:
                raise InvalidTagError("the tag does not match")
            return out.raw[: total + written.value]
        finally:
            lib.EVP_CIPHER_CTX_free(ctx)


def _check_nonce(nonce: bytes) -> None:
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"AES-GCM nonces here are {NONCE_BYTES} bytes")


def _ok(result: int) -> None:
    if result <= 0:
        raise RuntimeError("libcrypto refused an AES-GCM step")


class _PackageAesGcm:
    """The same through `cryptography`, where the system's libcrypto cannot be reached."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if len(key) != KEY_BYTES:
            raise ValueError("AES-256-GCM needs a 32-byte key")
        self._aead = AESGCM(key)

    def encrypt(self, nonce: bytes, data: bytes, associated: bytes) -> bytes:
        _check_nonce(nonce)
        return self._aead.encrypt(nonce, data, associated)

    def decrypt(self, nonce: bytes, data: bytes, associated: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        _check_nonce(nonce)
        try:
            return self._aead.decrypt(nonce, data, associated)
        except InvalidTag as exc:
            raise InvalidTagError("the tag does not match") from exc


_LIBCRYPTO = _system_libcrypto()


def aes_gcm(key: bytes, *, backend: str = "auto") -> Aead:
    """AES-256-GCM under `key`: the system's libcrypto ("system"), `cryptography`
    ("package"), or the first of these that is available ("auto")."""
    if backend == "package" or (backend == "auto" and _LIBCRYPTO is None):
        return _PackageAesGcm(key)
    if _LIBCRYPTO is None:
        raise RuntimeError("the system's libcrypto cannot be reached through _hashlib")
    return _SystemAesGcm(_LIBCRYPTO, key)

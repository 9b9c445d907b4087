"""AES-256-GCM through the interpreter's libcrypto against `cryptography`'s, both ways; HKDF
against `cryptography`'s; the GCM specification's known answers."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given
from hypothesis import strategies as st

from llmrelay.store.aead import InvalidTagError, aes_gcm, hkdf_sha256

keys = st.binary(min_size=32, max_size=32)
nonces = st.binary(min_size=12, max_size=12)
BACKENDS = ("system", "package")


@given(key=keys, nonce=nonces, data=st.binary(max_size=3000), associated=st.binary(max_size=64))
def test_both_backends_seal_what_cryptography_seals(
    key: bytes, nonce: bytes, data: bytes, associated: bytes
) -> None:
    reference = AESGCM(key).encrypt(nonce, data, associated)
    for backend in BACKENDS:
        aead = aes_gcm(key, backend=backend)
        assert aead.encrypt(nonce, data, associated) == reference
        assert aead.decrypt(nonce, reference, associated) == data
    sealed_here = aes_gcm(key).encrypt(nonce, data, associated)
    assert AESGCM(key).decrypt(nonce, sealed_here, associated) == data


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gcm_specifications_test_cases_13_and_14(backend: str) -> None:
    """McGrew and Viega, "The Galois/Counter Mode of Operation", 256-bit key test cases."""
    aead = aes_gcm(bytes(32), backend=backend)
    assert aead.encrypt(bytes(12), b"", b"").hex() == "530f8afbc74536b9a963b4f1c4cb738b"
    assert aead.encrypt(bytes(12), bytes(16), b"").hex() == (
        "cea7403d4d606b6e074ec5d3baf39d18" + "d0d1c8a799996bf0265b98b5d48ab919"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_any_change_fails_authentication(backend: str) -> None:
    key, nonce = bytes(range(32)), bytes(range(12))
    aead = aes_gcm(key, backend=backend)
    sealed = aead.encrypt(nonce, b"sk-provider-secret", b"prov1")
    for position in (0, len(sealed) // 2, len(sealed) - 1):
        flipped = bytearray(sealed)
        flipped[position] ^= 1
        with pytest.raises(InvalidTagError):
            aead.decrypt(nonce, bytes(flipped), b"prov1")
    with pytest.raises(InvalidTagError):
        aead.decrypt(nonce, sealed, b"prov2")
    with pytest.raises(InvalidTagError):
        aead.decrypt(bytes(12), sealed, b"prov1")
    with pytest.raises(InvalidTagError):
        aead.decrypt(nonce, sealed[:15], b"prov1")
    with pytest.raises(InvalidTagError):
        aes_gcm(bytes(32), backend=backend).decrypt(nonce, sealed, b"prov1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_sizes_are_refused(backend: str) -> None:
    with pytest.raises(ValueError, match="32-byte key"):
        aes_gcm(bytes(16), backend=backend)
    with pytest.raises(ValueError, match="12 bytes"):
        aes_gcm(bytes(32), backend=backend).encrypt(bytes(8), b"x", b"")


@given(
    secret=st.binary(max_size=80),
    salt=st.binary(max_size=20),
    info=st.binary(max_size=40),
    length=st.integers(min_value=1, max_value=100),
)
def test_hkdf_matches_cryptography(secret: bytes, salt: bytes, info: bytes, length: int) -> None:
    expected = HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(secret)
    assert hkdf_sha256(secret, salt=salt, info=info, length=length) == expected

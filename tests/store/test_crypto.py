import pytest

from llmrelay.store.crypto import CredentialError, Sealer


def test_seal_round_trip_and_fresh_nonce_each_time() -> None:
    sealer = Sealer("a-secret-key-of-reasonable-length-123")
    first = sealer.seal(b"sk-provider-secret", context="prov1")
    second = sealer.seal(b"sk-provider-secret", context="prov1")
    assert first != second
    assert b"sk-provider-secret" not in first.encode()
    assert sealer.open(first, context="prov1") == b"sk-provider-secret"
    assert first.startswith(f"v1.{sealer.key_id}.")


def test_wrong_context_or_tampering_fails() -> None:
    sealer = Sealer("a-secret-key-of-reasonable-length-123")
    sealed = sealer.seal(b"value", context="prov1")
    with pytest.raises(CredentialError):
        sealer.open(sealed, context="prov2")
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(CredentialError):
        sealer.open(tampered, context="prov1")


def test_another_secret_key_is_named_as_the_cause() -> None:
    sealed = Sealer("first-secret-key-of-reasonable-length").seal(b"v", context="p")
    with pytest.raises(CredentialError, match="LLMRELAY_SECRET_KEY changed"):
        Sealer("second-secret-key-of-reasonable-length").open(sealed, context="p")

"""Sealing: AES-GCM per value, the key id in the value, previous keys during a rotation."""

from pathlib import Path

import pytest

from llmrelay.settings import Settings
from llmrelay.store.crypto import CredentialError, Sealer, UnknownKeyError, key_id_of, sealer_for


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


OLD = "old-secret-key-of-reasonable-length-0001"
NEW = "new-secret-key-of-reasonable-length-0002"


def test_previous_keys_open_but_never_seal() -> None:
    under_old = Sealer(OLD).seal(b"v", context="p")
    rotating = Sealer(NEW, [OLD])
    assert rotating.open(under_old, context="p") == b"v"
    assert rotating.key_ids == (Sealer(NEW).key_id, Sealer(OLD).key_id)
    fresh = rotating.seal(b"w", context="p")
    assert key_id_of(fresh) == Sealer(NEW).key_id
    with pytest.raises(UnknownKeyError):  # the new value does not open under the old key
        Sealer(OLD).open(fresh, context="p")


def test_reseal_moves_a_value_to_the_current_key_once() -> None:
    under_old = Sealer(OLD).seal(b"v", context="p")
    rotating = Sealer(NEW, [OLD])
    resealed = rotating.reseal(under_old, context="p")
    assert resealed is not None and key_id_of(resealed) == rotating.key_id
    assert Sealer(NEW).open(resealed, context="p") == b"v"
    assert rotating.reseal(resealed, context="p") is None  # already current: left alone


def test_an_unknown_key_is_named_and_context_still_binds() -> None:
    stranger = Sealer("a-third-secret-key-of-reasonable-length")
    sealed = stranger.seal(b"v", context="p")
    with pytest.raises(UnknownKeyError) as caught:
        Sealer(NEW, [OLD]).reseal(sealed, context="p")
    assert caught.value.key_id == stranger.key_id
    assert stranger.key_id in str(caught.value)
    with pytest.raises(CredentialError, match="authentication"):
        Sealer(NEW, [OLD]).open(Sealer(OLD).seal(b"v", context="p"), context="q")


def test_sealer_for_adds_the_previous_key_from_the_settings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gw.db"
    under_old = Sealer(OLD).seal(b"v", context="p")
    sealer = sealer_for(Settings(database_url=url, secret_key=NEW, previous_secret_key=OLD))
    assert sealer.key_id == Sealer(NEW).key_id
    assert sealer.open(under_old, context="p") == b"v"
    with pytest.raises(UnknownKeyError):
        sealer_for(Settings(database_url=url, secret_key=NEW)).open(under_old, context="p")
    from_file = sealer_for(Settings(database_url=url, secret_key=NEW), [OLD])
    assert from_file.open(under_old, context="p") == b"v"

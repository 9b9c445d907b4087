import hashlib

from llmrelay import apikeys


def test_generated_keys_are_unique_prefixed_and_long() -> None:
    keys = {apikeys.generate_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith(apikeys.KEY_PREFIX)
        assert len(key) >= apikeys.MIN_KEY_LENGTH + 20


def test_digest_is_sha256_hex_of_the_whole_key() -> None:
    key = "sk-lr-example-key-123456"
    assert apikeys.digest(key) == hashlib.sha256(key.encode()).hexdigest()
    assert apikeys.digest(key) != apikeys.digest(key + "x")


def test_display_parts_never_reveal_the_middle() -> None:
    key = "sk-lr-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
    shown = apikeys.display(key)
    assert shown.prefix == "sk-lr-ABCD"
    assert shown.last_four == "0123"
    assert "QRST" not in shown.prefix + shown.last_four

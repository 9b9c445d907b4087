"""The key digest memo used by authentication."""

from __future__ import annotations

from llmrelay import apikeys
from llmrelay.gateway import auth


def test_the_memo_answers_the_real_digest_and_stays_bounded() -> None:
    keys = [f"sk-test-{i:06d}-abcdefghijklmnop" for i in range(auth._DIGESTS_MAX + 10)]
    for key in keys:
        assert auth.key_digest(key) == apikeys.digest(key)
        assert len(auth._DIGESTS) <= auth._DIGESTS_MAX
    assert auth.key_digest(keys[-1]) == apikeys.digest(keys[-1])  # from the memo now
    assert keys[-1] in auth._DIGESTS

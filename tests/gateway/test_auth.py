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


def test_a_gemini_client_presents_its_key_in_its_header_or_the_query() -> None:
    goog = (b"x-goog-api-key", b" goog-key ")
    bearer = (b"authorization", b"Bearer bearer-key")
    assert auth.gemini_key([bearer, goog], {"key": "query-key"}) == "goog-key"
    assert auth.gemini_key([bearer], {"key": "query-key"}) == "bearer-key"
    assert auth.gemini_key([(b"x-api-key", b"api-key")], {}) == "api-key"
    assert auth.gemini_key([(b"x-goog-api-key", b"")], {"key": "query-key"}) == "query-key"
    assert auth.gemini_key([], {}) is None

"""What an audit entry keeps of a change: the changed fields, secrets masked by name."""

from __future__ import annotations

from llmrelay.admin.audit import MASK, diff, is_secret, mask


def test_secrets_are_masked_at_any_depth() -> None:
    assert mask(
        {"api_key": "sk-1", "nested": {"Password": "p", "ok": 1}, "list": [{"token": 2}]}
    ) == {
        "api_key": MASK,
        "nested": {"Password": MASK, "ok": 1},
        "list": [{"token": MASK}],
    }
    assert diff(
        {"name": "a", "secret": "x", "same": 1}, {"name": "b", "secret": "y", "same": 1}
    ) == {
        "name": {"before": "a", "after": "b"},
        "secret": {"before": MASK, "after": MASK},
    }
    assert diff(None, {"key": "k", "headers": {"Authorization": "x", "x-api-key": "y"}}) == {
        "headers": {"after": {"Authorization": MASK, "x-api-key": MASK}},
        "key": {"after": MASK},
    }
    assert diff({"gone": 1}, None) == {"gone": {"before": 1}}


def test_secret_names() -> None:
    for name in (
        "password",
        "new_password",
        "client_secret",
        "api_key",
        "X-Api-Key",
        "token",
        "csrf_token",
        "key",
        "credentials",
        "Authorization",
        "private_key",
    ):
        assert is_secret(name), name
    for name in ("name", "email", "keys", "key_id", "monthly_budget_usd", "role"):
        assert not is_secret(name), name

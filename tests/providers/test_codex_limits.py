"""Reading a ChatGPT account's usage limits (providers/codex/limits.py) in the three shapes
the Codex backend states them, and the id token's claims (providers/codex/oauth.py)."""

from __future__ import annotations

import orjson

from llmrelay.providers.codex import limits, oauth
from llmrelay.providers.codex.adapter import completed_response
from tests.support.mock_codex import jwt

NOW = 1_800_000_000.0


def test_headers_give_both_windows() -> None:
    headers = {
        "x-codex-primary-used-percent": "42.5",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(int(NOW + 600)),
        "x-codex-secondary-used-percent": "7",
        "x-codex-secondary-reset-after-seconds": "3600",
    }
    found = limits.from_headers(headers.get, NOW)
    assert found["primary"] == {"used_percent": 42.5, "window_minutes": 300, "resets_at": NOW + 600}
    assert found["secondary"]["resets_at"] == NOW + 3600
    assert limits.exhausted_until(found, NOW) is None


def test_a_used_up_window_rests_the_account_until_its_reset() -> None:
    found = limits.from_usage(
        {
            "plan_type": "plus",
            "rate_limit": {
                "primary_window": {
                    "used_percent": 100,
                    "limit_window_seconds": 18000,
                    "reset_at": NOW + 900,
                },
                "secondary_window": {"used_percent": 20, "reset_at": NOW + 86400},
            },
        }
    )
    assert found["plan_type"] == "plus" and found["primary"]["window_minutes"] == 300
    assert limits.exhausted_until(found, NOW) == NOW + 900
    assert limits.exhausted_until(found, NOW + 901) is None  # reset: usable again


def test_only_usage_limit_reached_is_a_rest() -> None:
    reached = orjson.dumps({"error": {"type": "usage_limit_reached", "resets_at": NOW + 50}})
    assert limits.limit_reached_until(reached, None, NOW) == NOW + 50
    by_hint = orjson.dumps({"error": {"code": "usage_limit_reached"}})
    assert limits.limit_reached_until(by_hint, "120", NOW) == NOW + 120
    plain = orjson.dumps({"error": {"type": "rate_limit_exceeded"}})
    assert limits.limit_reached_until(plain, "5", NOW) is None
    assert limits.limit_reached_until(b"not json", None, NOW) is None


def test_identity_and_expiry_from_the_tokens() -> None:
    id_token = jwt(
        {
            "email": "a@example.com",
            "https://api.openai.com/auth": {
                "chatgpt_account_id": "acct-9",
                "chatgpt_plan_type": "pro",
            },
        }
    )
    tokens = oauth.Tokens(jwt({"exp": int(NOW)}), "rt", id_token)
    assert oauth.identity(tokens) == oauth.Identity("acct-9", "a@example.com", "pro")
    expires = oauth.expires_at(tokens)
    assert expires is not None and expires.timestamp() == NOW
    assert oauth.Tokens.from_json(tokens.as_json()) == tokens


def test_a_stream_read_as_its_completed_response() -> None:
    done = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
    stream = (
        b'event: response.created\ndata: {"type":"response.created","response":{}}\n\n'
        b"event: response.completed\ndata: "
        + orjson.dumps({"type": "response.completed", "response": done})
        + b"\n\n"
    )
    assert orjson.loads(completed_response(stream)) == done

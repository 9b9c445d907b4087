"""The gemini provider adapter's own helpers."""

from __future__ import annotations

import orjson

from llmrelay.providers.gemini import retry_delay


def test_a_retry_delay_is_read_from_googles_error_details() -> None:
    body = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}
            ],
        }
    }
    assert retry_delay(orjson.dumps(body)) == "1.5"
    assert retry_delay(orjson.dumps([body])) == "1.5"
    assert retry_delay(b'{"error": {"code": 429}}') is None
    assert retry_delay(b"not json") is None

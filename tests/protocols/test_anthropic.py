import orjson
import pytest

from llmrelay.protocols import anthropic


def test_anthropic_wire_helpers() -> None:
    assert anthropic.error_payload("overloaded_error", "Overloaded") == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert orjson.loads(anthropic.error_body("api_error", "boom", request_id="req_1")) == {
        "type": "error",
        "error": {"type": "api_error", "message": "boom"},
        "request_id": "req_1",
    }
    assert anthropic.sse_event("message_stop", {"type": "message_stop"}) == (
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    assert anthropic.error_event("overloaded_error", "Overloaded").startswith(b"event: error\n")
    assert anthropic.upstream_error(anthropic.error_body("rate_limit_error", "slow")) == (
        "rate_limit_error",
        "slow",
    )
    assert anthropic.upstream_error(b"<html>") is None


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error"),
     (404, "not_found_error"), (409, "invalid_request_error"), (413, "request_too_large"),
     (429, "rate_limit_error"), (500, "api_error"), (502, "api_error"),
     (503, "overloaded_error"), (504, "timeout_error"), (529, "overloaded_error")],
)  # fmt: skip
def test_error_type_for_status(status: int, error_type: str) -> None:
    assert anthropic.error_type_for_status(status) == error_type

"""The Gemini wire helpers: finish reasons, error messages, function parameter schemas."""

from __future__ import annotations

from typing import Any

import pytest

from llmrelay.protocols import gemini
from tests.protocols.gemini_support import fixture, tool, translated


def test_parameters_keep_only_what_gemini_schema_accepts() -> None:
    case = fixture("schema_parameters.json")
    assert gemini.function_parameters(case["json_schema"]) == case["gemini"]


@pytest.mark.parametrize(
    "schema", [None, {"type": "object", "properties": {}}, {"type": "object"}, "free"]
)
def test_a_function_without_parameters_declares_none(schema: Any) -> None:
    assert gemini.function_parameters(schema) is None
    declarations = translated(tools=[tool("ping", schema)])["tools"][0]["functionDeclarations"]
    assert declarations == [{"name": "ping"}]


@pytest.mark.parametrize(
    ("reason", "calls", "expected"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_calls"),
        ("MAX_TOKENS", True, "length"),
        ("SAFETY", False, "content_filter"),
        ("RECITATION", False, "content_filter"),
        ("SPII", False, "content_filter"),
        ("MALFORMED_FUNCTION_CALL", False, "stop"),
        ("OTHER", False, "stop"),
        (None, False, "stop"),
    ],
)
def test_finish_reasons(reason: str | None, calls: bool, expected: str) -> None:
    assert gemini.finish_reason(reason, tool_calls=calls) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"error": {"code": 503, "message": "Overloaded.", "status": "UNAVAILABLE"}}',
            "Overloaded.",
        ),
        (
            b'[{"error": {"code": 400, "message": "Bad thing", "status": "INVALID_ARGUMENT"}}]',
            "Bad thing",
        ),
        (b'{"error": "text"}', None),
        (b"<html>", None),
    ],
)
def test_error_bodies_give_their_message(body: bytes, message: str | None) -> None:
    assert gemini.upstream_error_message(body) == message

"""Reasoning between Gemini parts and the hub's reasoning fields (protocols/gemini_reasoning.py),
and the smaller Gemini pieces: Schema as JSON Schema, embeddings, Google's error bodies."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from llmrelay.protocols import gemini_reasoning
from llmrelay.protocols.gemini_embed import embed_request_to_openai, openai_embeddings_to_gemini
from llmrelay.protocols.gemini_models import error_body, is_google_error, status_name
from llmrelay.protocols.gemini_schema import json_schema_of
from llmrelay.protocols.translation import TranslationError


def test_packed_details_come_back_as_they_were() -> None:
    details = [
        {
            "type": "reasoning.encrypted",
            "data": "xyz",
            "format": "openai-responses-v1",
            "id": "rs_1",
        },
        {
            "type": "reasoning.text",
            "text": "é ✓",
            "signature": "s",
            "format": "anthropic-claude-v1",
        },
    ]
    packed = gemini_reasoning.pack(details)
    assert packed.startswith(gemini_reasoning.PACKED_PREFIX) and "." not in packed[22:]
    assert gemini_reasoning.unpack(packed) == details
    assert gemini_reasoning.unpack("CiwBVKhc7oC3Mj0Pyw0ifhDN") is None  # Gemini's own
    assert gemini_reasoning.unpack(gemini_reasoning.PACKED_PREFIX + "!!!") is None
    assert gemini_reasoning.unpack(None) is None


def test_stream_pieces_merge_into_whole_details() -> None:
    merged: list[dict[str, Any]] = []
    pieces = [
        [{"type": "reasoning.text", "text": "Let ", "format": "a"}],
        [{"type": "reasoning.text", "text": "me", "format": "a"}],
        [{"type": "reasoning.text", "signature": "S1", "format": "a"}],
        [{"type": "reasoning.text", "text": "Again", "format": "a"}],
        [{"type": "reasoning.encrypted", "data": "R", "format": "a"}],
        [{"type": "reasoning.summary", "summary": "x", "format": "b", "index": 0}],
        [{"type": "reasoning.summary", "summary": "y", "format": "b", "index": 0}],
        [{"type": "reasoning.summary", "summary": "z", "format": "b", "index": 1}],
    ]
    for piece in pieces:
        gemini_reasoning.merge_details(merged, piece)
    assert merged == [
        {"type": "reasoning.text", "text": "Let me", "format": "a", "signature": "S1"},
        {"type": "reasoning.text", "text": "Again", "format": "a"},
        {"type": "reasoning.encrypted", "data": "R", "format": "a"},
        {"type": "reasoning.summary", "summary": "xy", "format": "b", "index": 0},
        {"type": "reasoning.summary", "summary": "z", "format": "b", "index": 1},
    ]


def test_openapi_schemas_read_as_json_schema() -> None:
    assert json_schema_of(
        {
            "type": "OBJECT",
            "nullable": True,
            "properties": {
                "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "maxItems": 3},
                "choice": {"anyOf": [{"type": "INTEGER"}, {"type": "BOOLEAN"}], "nullable": True},
            },
            "propertyOrdering": ["tags", "choice"],
        }
    ) == {
        "type": ["object", "null"],
        "properties": {
            "tags": {"type": "array", "maxItems": 3, "items": {"type": "string"}},
            "choice": {"anyOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "null"}]},
        },
    }


def test_embed_requests_as_openai_and_back() -> None:
    body, dropped = embed_request_to_openai(
        {"content": {"parts": [{"text": "a"}, {"text": "b"}]}, "taskType": "RETRIEVAL_QUERY"},
        upstream_model="up",
        batch=False,
    )
    assert body == {"model": "up", "input": ["a\nb"], "encoding_format": "float"}
    assert dropped == ["taskType"]
    batch = {
        "requests": [
            {"content": {"parts": [{"text": "x"}]}, "outputDimensionality": 8},
            {"content": {"parts": [{"text": "y"}]}, "outputDimensionality": 8},
        ]
    }
    body, _ = embed_request_to_openai(batch, upstream_model="up", batch=True)
    assert body["input"] == ["x", "y"] and body["dimensions"] == 8
    answer = {
        "data": [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}],
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }
    assert openai_embeddings_to_gemini(answer, batch=True) == {
        "embeddings": [{"values": [1.0]}, {"values": [2.0]}],
        "usageMetadata": {"promptTokenCount": 2, "totalTokenCount": 2},
    }


@pytest.mark.parametrize(
    "payload",
    [
        {"content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": "x"}}]}},
        {"content": {}},
    ],
)
def test_what_openai_cannot_embed_is_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(TranslationError):
        embed_request_to_openai(payload, upstream_model="up", batch=False)


def test_googles_error_bodies() -> None:
    body = orjson.loads(
        error_body(429, "slow down", reason="rate_limited", request_id="req_1", retry_after="3")
    )
    assert body == {
        "error": {
            "code": 429,
            "message": "slow down",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "rate_limited",
                    "domain": "llmrelay",
                    "metadata": {"request_id": "req_1"},
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"},
            ],
        }
    }
    assert is_google_error(body) and is_google_error([body])
    assert not is_google_error({"error": {"message": "openai's", "type": "x"}})
    assert [status_name(s) for s in (400, 401, 403, 404, 418, 502, 599)] == [
        "INVALID_ARGUMENT",
        "UNAUTHENTICATED",
        "PERMISSION_DENIED",
        "NOT_FOUND",
        "INVALID_ARGUMENT",
        "UNAVAILABLE",
        "INTERNAL",
    ]

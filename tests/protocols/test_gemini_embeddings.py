"""OpenAI Embeddings <-> Gemini batchEmbedContents."""

import base64
import struct

import pytest

from llmrelay.protocols.gemini_embeddings import (
    embeddings_request_to_gemini,
    gemini_embeddings_to_openai,
    vector_value,
)
from llmrelay.protocols.translation import TranslationError


def test_one_request_per_input_with_the_model_and_dimensions() -> None:
    body = embeddings_request_to_gemini({"input": ["a", "b"], "dimensions": 8}, upstream_model="e")
    assert body == {
        "requests": [
            {"model": "models/e", "content": {"parts": [{"text": t}]}, "outputDimensionality": 8}
            for t in ("a", "b")
        ]
    }


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"input": [[1, 2, 3]]}, "input"),
        ({"input": []}, "input"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
    ],
)
def test_what_gemini_cannot_take_names_the_field(payload: dict[str, object], param: str) -> None:
    with pytest.raises(TranslationError) as refused:
        embeddings_request_to_gemini(payload, upstream_model="e")
    assert refused.value.param == param


def test_the_answer_reads_as_openai_floats_or_base64() -> None:
    body = {"embeddings": [{"values": [0.25, -1.0]}, {"values": [2.0, 0.5]}]}
    floats = gemini_embeddings_to_openai(body, model="m", texts=["abcdefgh", "x"], as_base64=False)
    assert [d["embedding"] for d in floats["data"]] == [[0.25, -1.0], [2.0, 0.5]]
    assert floats["usage"] == {"prompt_tokens": 3, "total_tokens": 3}  # 2 + 1, never 0
    encoded = gemini_embeddings_to_openai(body, model="m", texts=["a", "b"], as_base64=True)
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    assert list(struct.unpack("<2f", raw)) == [0.25, -1.0]
    assert vector_value([1.0], False) == [1.0]
    with pytest.raises(ValueError):
        gemini_embeddings_to_openai(body, model="m", texts=["only one"], as_base64=False)

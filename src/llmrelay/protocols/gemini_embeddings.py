"""OpenAI Embeddings <-> Gemini's batchEmbedContents.

One `requests[]` entry per input string, the model named in each (Gemini wants it there as
`models/NAME`), `dimensions` as `outputDimensionality`. Gemini reports no token counts for
embeddings: the answer's usage is the gateway's estimate (about four characters a token),
never zero.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from llmrelay.protocols.translation import TranslationError

CHARS_PER_TOKEN = 4


def embeddings_request_to_gemini(payload: dict[str, Any], *, upstream_model: str) -> dict[str, Any]:
    texts = input_texts(payload)
    dimensions = payload.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or dimensions < 1):
        raise TranslationError("'dimensions' must be a positive integer", param="dimensions")
    requests = []
    for text in texts:
        request: dict[str, Any] = {
            "model": f"models/{upstream_model}",
            "content": {"parts": [{"text": text}]},
        }
        if dimensions is not None:
            request["outputDimensionality"] = dimensions
        requests.append(request)
    return {"requests": requests}


def input_texts(payload: dict[str, Any]) -> list[str]:
    """The inputs as strings (token-id arrays have no meaning to another tokenizer)."""
    given = payload.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise TranslationError(
            "'input' must be a string or a list of strings for this provider", param="input"
        )
    return texts


def gemini_embeddings_to_openai(
    body: dict[str, Any], *, model: str, texts: list[str], as_base64: bool
) -> dict[str, Any]:
    embeddings = body["embeddings"]
    if not isinstance(embeddings, list) or len(embeddings) != len(texts):
        raise ValueError("the answer does not have one embedding per input")
    data = [
        {"object": "embedding", "index": i, "embedding": vector_value(e["values"], as_base64)}
        for i, e in enumerate(embeddings)
    ]
    tokens = sum(max(1, len(t) // CHARS_PER_TOKEN) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def vector_value(vector: list[float], as_base64: bool) -> list[float] | str:
    """An embedding as OpenAI sends it: floats, or little-endian float32 in base64 when the
    client asked `encoding_format: base64` (the openai SDK's default)."""
    if not as_base64:
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()

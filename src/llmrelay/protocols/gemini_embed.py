"""Gemini's embedContent and batchEmbedContents as OpenAI Embeddings and back (a Gemini client,
a provider reached through OpenAI's embeddings API).

Each request's content (its text parts joined) is one input string; `outputDimensionality` is
`dimensions` (one value for the whole batch); `taskType` and `title` have no OpenAI field and
are named in the dropped list. The answer is `{"embedding": {"values"}}` (or `{"embeddings":
[...]}` for a batch), with the provider's token count as `usageMetadata` (an addition of
llmrelay's: Gemini's embeddings report none).
"""

from __future__ import annotations

from typing import Any

from llmrelay.protocols.translation import TranslationError


def embed_request_to_openai(
    payload: dict[str, Any], *, upstream_model: str, batch: bool
) -> tuple[dict[str, Any], list[str]]:
    dropped: list[str] = []
    if batch:
        requests = payload.get("requests")
        if not isinstance(requests, list) or not requests:
            raise TranslationError("requests must be a non-empty list", param="requests")
    else:
        requests = [payload]
    texts: list[str] = []
    dimensions: set[int] = set()
    for position, request in enumerate(requests):
        where = f"requests[{position}]" if batch else "content"
        if not isinstance(request, dict):
            raise TranslationError(f"{where} must be an object", param="requests")
        texts.append(_text(request.get("content"), where))
        size = request.get("outputDimensionality", request.get("output_dimensionality"))
        if size is not None:
            if type(size) is not int or size < 1:
                raise TranslationError(
                    "outputDimensionality must be a positive integer", param="outputDimensionality"
                )
            dimensions.add(size)
        for key in ("taskType", "task_type", "title"):
            if request.get(key) is not None and key not in dropped:
                dropped.append(key)
    if len(dimensions) > 1:
        raise TranslationError(
            "every request of a batch must ask the same outputDimensionality here",
            param="outputDimensionality",
        )
    body: dict[str, Any] = {"model": upstream_model, "input": texts, "encoding_format": "float"}
    if dimensions:
        body["dimensions"] = dimensions.pop()
    return body, dropped


def _text(content: Any, where: str) -> str:
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts:
        raise TranslationError(f"{where} must be a Content with parts", param="content")
    texts = []
    for part in parts:
        text = part.get("text") if isinstance(part, dict) else None
        if not isinstance(text, str):
            raise TranslationError(f"{where}: only text can be embedded here", param="content")
        texts.append(text)
    return "\n".join(texts)


def openai_embeddings_to_gemini(body: dict[str, Any], *, batch: bool) -> dict[str, Any]:
    data = sorted(body["data"], key=lambda item: int(item.get("index", 0)))
    vectors = []
    for item in data:
        values = item["embedding"]
        if not isinstance(values, list):
            raise ValueError("the embedding is not a list of floats")
        vectors.append({"values": values})
    answer: dict[str, Any] = {"embeddings": vectors} if batch else {"embedding": vectors[0]}
    usage = body.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if type(tokens) is int:
        answer["usageMetadata"] = {"promptTokenCount": tokens, "totalTokenCount": tokens}
    return answer

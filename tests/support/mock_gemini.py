"""The Gemini API's generateContent on the mock upstream, so a gateway's `gemini` adapter is
tested against the real wire format (ai.google.dev/api: Generating content, API errors).

Base URL: the host root (`MockUpstream.root_url`); the routes are
`POST /v1beta/models/{model}:generateContent` and `...:streamGenerateContent` (also under
`/v1`), `:countTokens` (words, as its usage counts them), `:embedContent` and
`:batchEmbedContents`. With `?alt=sse` the stream is server-sent events framed as the API
frames them, `data: <GenerateContentResponse>\\r\\n\\r\\n` with no closing sentinel; without
it, one JSON array of the same responses (the API's default). The key goes in
`x-goog-api-key` (or `?key=`); without one the API answers 403 PERMISSION_DENIED. Errors are
`{"error": {"code", "message", "status"}}` with the canonical status for the HTTP code.

The model in the path picks the behaviour, as on the OpenAI side (`mock_upstream._behaviour`):
echo, status-CODE, slow-MS, fail-first-N (503 UNAVAILABLE), throttle-first-N (429
RESOURCE_EXHAUSTED whose retry hint is a `google.rpc.RetryInfo` detail, `"retryDelay": "1s"`:
Google sends no Retry-After header), and drop-after-N (cut the stream after N events).

The mock model echoes the text of the last user turn (after a final `model` turn, only the
rest of it: the answer continues that turn, unless the model's name starts with `fresh`);
when the request declares `tools[].functionDeclarations` and that text starts with "call:",
it answers a `functionCall`
of the first declared function with `{"query": <the rest>}`; a `functionResponse` in the last
user turn gets "result: <its response as compact JSON>". Answers longer than
`generationConfig.maxOutputTokens` words are cut there (finishReason MAX_TOKENS). Tokens are
words: promptTokenCount counts the request's text (systemInstruction and contents), of which
a request with a `systemInstruction` reports 3 as cachedContentTokenCount (included in the
prompt count, as in the API). Stream events each carry the usage so far (cumulative, so a
gateway must keep the last, not add them up); the last one also carries the finishReason.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tests.support.mock_upstream import MockUpstream, _behaviour, _dumps

#: The canonical status Google's APIs name for each HTTP code.
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
#: Tokens a request with a `systemInstruction` reports as read from the cache.
CACHED_SYSTEM_TOKENS = 3
METHODS = (
    "generateContent",
    "streamGenerateContent",
    "countTokens",
    "embedContent",
    "batchEmbedContents",
)


def reported_model(model: str) -> str:
    """The dated version the API names in `modelVersion` (`gemini-x` -> `gemini-x-2025-01-01`)."""
    return f"{model}-2025-01-01"


@dataclass(frozen=True)
class Answer:
    """What the mock model says: `text`, or a `call` (`{"name", "args"}`) of a function."""

    text: str
    call: dict[str, Any] | None
    finish_reason: str


class GeminiModels:
    """The `models/{model}:{method}` route; requests are recorded and shared failures decided
    by `server`."""

    def __init__(self, server: MockUpstream) -> None:
        self.server = server

    async def target(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._receive(request)
        model, _, method = request.match_info["target"].partition(":")
        refused: web.StreamResponse | None = _refusal(request, method)
        if refused is None:
            refused = await self.server._admit(request, model, _error)
        if refused is not None:
            return refused
        if method == "batchEmbedContents":
            return web.json_response({"embeddings": _embeddings(body)}, dumps=_dumps)
        if method == "embedContent":
            embedded = _embeddings({"requests": [body]})[0]
            return web.json_response({"embedding": embedded}, dumps=_dumps)
        if method == "countTokens":
            counted = body.get("generateContentRequest") or body
            total = _usage(counted, 0).get("promptTokenCount", 0)
            return web.json_response({"totalTokens": total}, dumps=_dumps)
        responses = _responses(model, body, _continued(model, body, _answer(body)))
        if method == "generateContent":
            return web.json_response(responses[-1] | _whole(responses), dumps=_dumps)
        if request.query.get("alt") != "sse":
            return web.json_response(responses, dumps=_dumps)
        return await _stream(request, responses, *_behaviour(model))


def _embeddings(body: dict[str, Any]) -> list[dict[str, Any]]:
    """One vector per request: its length, word count and first byte, padded to
    `outputDimensionality` (default 3), so a test can tell inputs apart."""
    out = []
    for request in body.get("requests", []):
        text = " ".join(p.get("text", "") for p in request["content"]["parts"])
        size = int(request.get("outputDimensionality") or 3)
        values = [
            float(len(text)),
            float(len(text.split())),
            float(text.encode()[:1][0] if text else 0),
        ]
        out.append({"values": (values + [0.5] * size)[:size]})
    return out


def _refusal(request: web.Request, method: str) -> web.Response | None:
    if method not in METHODS:
        return _error(404, message=f"Method {method!r} is not found for this model.")
    if not (request.headers.get("x-goog-api-key") or request.query.get("key")):
        return _error(
            403,
            message="Method doesn't allow unregistered callers (callers without established "
            "identity). Please use API Key or other form of API consumer identity to call "
            "this API.",
        )
    return None


def _answer(body: dict[str, Any]) -> Answer:
    contents = body.get("contents", [])
    turn: dict[str, Any] = next(
        (c for c in reversed(contents) if c.get("role", "user") != "model"), {}
    )
    parts: list[dict[str, Any]] = turn.get("parts", [])
    responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
    if responses:
        result = orjson.dumps(responses[-1].get("response", {})).decode()
        return Answer(f"result: {result}", None, "STOP")
    text = " ".join(str(p["text"]) for p in parts if "text" in p)
    tools = body.get("tools") or []
    declared = [f for tool in tools for f in tool.get("functionDeclarations", [])]
    if declared and text.startswith("call:"):
        call = {"name": declared[0]["name"], "args": {"query": text[5:].strip()}}
        return Answer("", call, "STOP")
    words, limit = text.split(), int((body.get("generationConfig") or {}).get("maxOutputTokens", 0))
    if limit and len(words) > limit:
        return Answer(" ".join(words[:limit]), None, "MAX_TOKENS")
    return Answer(text, None, "STOP")


def _continued(model: str, body: dict[str, Any], answer: Answer) -> Answer:
    """After a final `model` turn (a partial answer to continue), only the rest of the echo,
    as Gemini continues such a turn; a `fresh...` model ignores it and answers anew."""
    contents = body.get("contents") or []
    last = contents[-1] if contents else {}
    if last.get("role") != "model" or answer.call is not None or model.startswith("fresh"):
        return answer
    said = "".join(str(p.get("text", "")) for p in last.get("parts", []))
    if not answer.text.startswith(said):
        return answer
    return Answer(answer.text[len(said) :], None, answer.finish_reason)


def _responses(model: str, body: dict[str, Any], answer: Answer) -> list[dict[str, Any]]:
    """The stream of GenerateContentResponses: two words each (a function call in one), each
    with the usage so far, the last with the finishReason."""
    pieces: list[dict[str, Any]] = [{"functionCall": answer.call}] if answer.call else []
    words = answer.text.split(" ") if answer.text else []
    for i in range(0, len(words), 2):
        pieces.append({"text": " ".join(words[i : i + 2]) + (" " if i + 2 < len(words) else "")})
    response_id = uuid.uuid4().hex[:22]
    responses = []
    emitted = 0
    for i, part in enumerate(pieces or [{"text": ""}]):
        emitted += len(_part_text(part).split())
        candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if i == len(pieces) - 1 or not pieces:
            candidate["finishReason"] = answer.finish_reason
        responses.append(
            {
                "candidates": [candidate],
                "usageMetadata": _usage(body, emitted),
                "modelVersion": reported_model(model),
                "responseId": response_id,
            }
        )
    return responses


def _whole(responses: list[dict[str, Any]]) -> dict[str, Any]:
    """The one GenerateContentResponse of generateContent: the stream's parts, merged."""
    parts = [p for r in responses for p in r["candidates"][0]["content"]["parts"]]
    if len(parts) > 1 and all("text" in p for p in parts):
        parts = [{"text": "".join(p["text"] for p in parts)}]
    candidate = responses[-1]["candidates"][0]
    return {"candidates": [{**candidate, "content": {"parts": parts, "role": "model"}}]}


def _usage(body: dict[str, Any], candidates: int) -> dict[str, Any]:
    texts = [body.get("systemInstruction") or {}, *body.get("contents", [])]
    prompt = sum(len(_part_text(p).split()) for c in texts for p in c.get("parts", []))
    usage: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if body.get("systemInstruction"):
        usage["cachedContentTokenCount"] = min(CACHED_SYSTEM_TOKENS, prompt)
    return {k: v for k, v in usage.items() if v}  # like the API, zero counts are left out


def _part_text(part: dict[str, Any]) -> str:
    if "text" in part:
        return str(part["text"])
    data = part.get("functionResponse") or part.get("functionCall")
    return orjson.dumps(data).decode() if data else ""


async def _stream(
    request: web.Request, responses: list[dict[str, Any]], kind: str, arg: int
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for i, payload in enumerate(responses):
        if kind == "drop" and i == arg:
            assert request.transport is not None
            request.transport.abort()
            return response
        await response.write(b"data: " + orjson.dumps(payload) + b"\r\n\r\n")
        await asyncio.sleep(0.01)
    await response.write_eof()
    return response


def _error(
    status: int, *, retry_after: str | None = None, message: str | None = None
) -> web.Response:
    error: dict[str, Any] = {
        "code": status,
        "message": message or f"upstream says {status} (key AIzaSyUpstream0123456789abcdefghijklm)",
        "status": STATUSES.get(status, "UNKNOWN"),
    }
    if status == 503 and message is None:
        error["message"] = "The model is overloaded. Please try again later."
    if retry_after:
        retry = {
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": f"{retry_after}s",
        }
        error["details"] = [retry]
    return web.json_response({"error": error}, status=status, dumps=_dumps)

"""Adapter for `gemini` providers (generateContent) serving chat-completions clients, and
Gemini clients natively (their body passed through, the model in the URL the route's).

The chat request becomes a generateContent request (protocols.chat_gemini); the model goes
in the URL (`/v1beta/models/MODEL:generateContent`, or `:streamGenerateContent?alt=sse` for
a stream) and the API key in `x-goog-api-key`, never in the query string (URLs end up in
logs). The answer is read back as chat (providers.translated).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

import orjson
import structlog

from llmrelay.protocols.chat_gemini import chat_request_to_gemini, gemini_response_to_chat
from llmrelay.protocols.chat_gemini_stream import GeminiStreamToChat
from llmrelay.protocols.gemini import upstream_error_message
from llmrelay.protocols.gemini_embeddings import (
    embeddings_request_to_gemini,
    gemini_embeddings_to_openai,
    input_texts,
)
from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import Operation, UnsupportedOperation, UpstreamRequest
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.providers.gemini_bridge import native_request
from llmrelay.providers.translated import TranslatedResponse, context_code
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

API_VERSION = "v1beta"
#: A Gemini client's operations, served natively.
NATIVE = frozenset(
    {
        Operation.GEMINI_GENERATE,
        Operation.GEMINI_STREAM,
        Operation.GEMINI_COUNT_TOKENS,
        Operation.GEMINI_EMBED,
        Operation.GEMINI_BATCH_EMBED,
    }
)


class GeminiAdapter:
    protocol = "gemini"

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        if operation is Operation.EMBEDDINGS:
            return _embeddings_request(route, payload, forwarded_headers)
        if operation is not Operation.CHAT:
            if operation in NATIVE:
                # A Gemini client's request: passed through, only the model rewritten.
                method, raw = native_request(operation, route, payload)
                headers = _headers(route, forwarded_headers)
                return UpstreamRequest(_url(route, method), headers, raw)
            raise UnsupportedOperation(f"gemini providers have no {operation.value} API here")
        body, dropped = chat_request_to_gemini(payload)
        if dropped:
            log.debug("translation_dropped_fields", provider=route.provider.slug, fields=dropped)
        stream = payload.get("stream") is True
        # A stream always ends with the usage chunk (the record, the cost and the limits
        # need it); the chat relay keeps it from a client that did not ask.
        include_usage = True
        model = route.upstream_model
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"

        def translate(response: Any) -> TranslatedResponse:
            return TranslatedResponse(response, _Decoder(model, include_usage, stream))

        return UpstreamRequest(
            url=_url(route, method),
            headers=_headers(route, forwarded_headers),
            body=orjson.dumps(body),
            translate=translate,
            # `stream` is the URL's method here and include_usage always honoured.
            dropped=tuple(d for d in dropped if d not in _HONOURED),
        )


#: Chat fields chat_request_to_gemini lists as dropped that this adapter honours itself.
_HONOURED: Final = frozenset({"stream", "stream_options"})


def _url(route: RouteSnap, method: str) -> str:
    model = quote(route.upstream_model, safe="")
    return f"{route.provider.base_url}/{API_VERSION}/models/{model}:{method}"


def _headers(route: RouteSnap, forwarded: Mapping[str, str]) -> dict[str, str]:
    provider = route.provider
    headers = {**forwarded, **provider.headers, "content-type": "application/json"}
    if provider.api_key:
        headers["x-goog-api-key"] = provider.api_key
    return headers


def _embeddings_request(
    route: RouteSnap, payload: dict[str, Any], forwarded: Mapping[str, str]
) -> UpstreamRequest:
    body = embeddings_request_to_gemini(payload, upstream_model=route.upstream_model)
    texts = input_texts(payload)
    as_base64 = payload.get("encoding_format") == "base64"
    model = route.upstream_model

    def translate(response: Any) -> TranslatedResponse:
        return TranslatedResponse(response, _EmbeddingsDecoder(model, texts, as_base64))

    return UpstreamRequest(
        url=_url(route, "batchEmbedContents"),
        headers=_headers(route, forwarded),
        body=orjson.dumps(body),
        translate=translate,
    )


class _Decoder:
    def __init__(self, model: str, include_usage: bool, stream: bool) -> None:
        self._model = model
        self._stream = GeminiStreamToChat(model=model, include_usage=include_usage)
        self._parser = SSEParser() if stream else None

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return gemini_response_to_chat(body, model=self._model)

    def error(self, status: int, raw: bytes) -> tuple[str, str | None]:
        message = upstream_error_message(raw) or f"gemini answered {status}"
        return message, context_code(message) if status == 400 else None

    def retry_after(self, raw: bytes) -> str | None:
        return retry_delay(raw)

    def chunks(self, chunk: bytes) -> list[dict[str, Any] | bytes | None]:
        assert self._parser is not None
        out: list[dict[str, Any] | bytes | None] = []
        for data in self._parser.feed_data(chunk):
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                out.append(None)
                continue
            if isinstance(event, dict) and isinstance(event.get("error"), dict):
                out.append({"error": event["error"]})  # an error mid-stream
            elif isinstance(event, dict):
                out.extend(self._stream.feed(event))
        return out

    def end(self) -> list[dict[str, Any] | bytes | None]:
        return list(self._stream.finish())


class _EmbeddingsDecoder:
    """batchEmbedContents' answer read as OpenAI Embeddings (never a stream)."""

    def __init__(self, model: str, texts: list[str], as_base64: bool) -> None:
        self._model = model
        self._texts = texts
        self._as_base64 = as_base64

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return gemini_embeddings_to_openai(
            body, model=self._model, texts=self._texts, as_base64=self._as_base64
        )

    def error(self, status: int, raw: bytes) -> tuple[str, str | None]:
        return upstream_error_message(raw) or f"gemini answered {status}", None

    def retry_after(self, raw: bytes) -> str | None:
        return retry_delay(raw)

    def chunks(self, chunk: bytes) -> list[dict[str, Any] | bytes | None]:
        raise UpstreamProtocolError("embeddings are not streamed")

    def end(self) -> list[dict[str, Any] | bytes | None]:
        return []


def retry_delay(raw: bytes) -> str | None:
    """Seconds from a Google error's `google.rpc.RetryInfo` detail (`"retryDelay": "1.5s"`),
    which Google sends instead of a Retry-After header."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if isinstance(body, list) and body:
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                try:
                    return str(float(delay[:-1]))
                except ValueError:
                    return None
    return None

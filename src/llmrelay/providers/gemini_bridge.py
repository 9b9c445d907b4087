"""Gemini clients (POST /v1beta/models/MODEL:METHOD) served by providers that do not speak
Gemini: through chat for generateContent and streamGenerateContent, through OpenAI's
embeddings API for embedContent and batchEmbedContents.

The Gemini request becomes a chat request (protocols.gemini_chat), the provider's adapter
builds its own request from that (an Anthropic provider's translates it again), and the
answer is read back as Gemini's: a completion becomes a GenerateContentResponse, chat chunks
become Gemini's stream events (protocols.gemini_chat_answer, gemini_chat_stream). Error bodies
stay in the chat shape: the gateway reads their message and writes Google's error itself.

OpenAI's own APIs (types openai and azure_openai) read none of the hub's reasoning fields
(`reasoning_content`, `reasoning_details`, a tool call's `extra_content`): they are taken off
the messages sent there and noted as dropped; OpenAI-compatible servers keep them (DeepSeek
and OpenRouter read them back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from llmrelay.protocols.gemini_chat import field, gemini_request_to_chat
from llmrelay.protocols.gemini_chat_answer import chat_response_to_gemini
from llmrelay.protocols.gemini_chat_stream import ChatStreamToGemini
from llmrelay.protocols.gemini_embed import embed_request_to_openai, openai_embeddings_to_gemini
from llmrelay.providers.base import Operation, UpstreamRequest, UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.providers.from_chat import Event, FromChat
from llmrelay.providers.messages_bridge import BuildChat, over_chat
from llmrelay.snapshot.model import RouteSnap

#: Provider types whose chat API is OpenAI's own: no reasoning fields in requests.
_OPENAI_OWN: Final = frozenset({"openai", "azure_openai"})
_HUB_FIELDS: Final = ("reasoning_content", "reasoning_details")


def gemini_over_chat(
    build_chat: BuildChat, route: RouteSnap, payload: dict[str, Any], *, stream: bool
) -> UpstreamRequest:
    """The upstream request for a generateContent `payload`, built by `build_chat` from its
    chat form, with a `translate` that reads the answer as Gemini's."""
    chat, dropped = gemini_request_to_chat(
        payload, upstream_model=route.upstream_model, stream=stream
    )
    if route.provider.type in _OPENAI_OWN:
        _strip_hub_fields(chat["messages"], dropped)
    include_thoughts = includes_thoughts(payload)

    def wrap(response: UpstreamResponse, *, model: str, stream: bool) -> UpstreamResponse:
        return GeminiFromChat(response, model=model, stream=stream, thoughts=include_thoughts)

    return over_chat(build_chat, route, chat, dropped, wrap)


def includes_thoughts(payload: dict[str, Any]) -> bool:
    config = field(payload, "generationConfig")
    thinking = field(config, "thinkingConfig") if isinstance(config, dict) else None
    return isinstance(thinking, dict) and field(thinking, "includeThoughts") is True


def _strip_hub_fields(messages: list[dict[str, Any]], dropped: list[str]) -> None:
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for name in _HUB_FIELDS:
            if message.pop(name, None) is not None and name not in dropped:
                dropped.append(name)
        for call in message.get("tool_calls") or []:
            if call.pop("extra_content", None) is not None and "thoughtSignature" not in dropped:
                dropped.append("thoughtSignature")


class GeminiFromChat(FromChat):
    """A chat response read as Gemini's generateContent / streamGenerateContent."""

    def __init__(
        self, inner: UpstreamResponse, *, model: str, stream: bool, thoughts: bool
    ) -> None:
        super().__init__(inner, stream=stream)
        self._model = model
        self._thoughts = thoughts
        self._events = ChatStreamToGemini(model=model, include_thoughts=thoughts)

    def _answer(self, completion: dict[str, Any]) -> dict[str, Any]:
        return chat_response_to_gemini(
            completion, model=self._model, include_thoughts=self._thoughts
        )

    def _feed(self, chunk: dict[str, Any]) -> list[Event]:
        return [("message", event) for event in self._events.feed(chunk)]

    def _finish(self) -> list[Event]:
        return [("message", event) for event in self._events.finish()]

    def _error(self, message: str) -> Event:
        return ("error", {"error": {"code": 500, "message": message, "status": "INTERNAL"}})


def gemini_embed_over_openai(
    build: Callable[[Operation, dict[str, Any]], UpstreamRequest],
    route: RouteSnap,
    payload: dict[str, Any],
    *,
    batch: bool,
) -> UpstreamRequest:
    """embedContent / batchEmbedContents as an OpenAI Embeddings request (built by the
    provider's adapter), its answer read back as Gemini's."""
    body, _dropped = embed_request_to_openai(
        payload, upstream_model=route.upstream_model, batch=batch
    )
    request = build(Operation.EMBEDDINGS, body)
    inner = request.translate

    def translate(response: UpstreamResponse) -> UpstreamResponse:
        if inner is not None:
            response = inner(response)
        return _EmbeddingsAsGemini(response, batch=batch)

    return UpstreamRequest(request.url, request.headers, request.body, translate, request.method)


class _EmbeddingsAsGemini:
    """An OpenAI Embeddings answer read as Gemini's (error bodies left as they are)."""

    def __init__(self, inner: UpstreamResponse, *, batch: bool) -> None:
        self._inner = inner
        self._batch = batch
        self.status = inner.status

    def header(self, name: str) -> str | None:
        return self._inner.header(name)

    async def read(self) -> bytes:
        raw = await self._inner.read()
        if self.status >= 300:
            return raw
        try:
            return orjson.dumps(openai_embeddings_to_gemini(orjson.loads(raw), batch=self._batch))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UpstreamProtocolError(f"the answer is not an embeddings list: {exc}") from None

    async def next_chunk(self) -> bytes:
        raise UpstreamProtocolError("embeddings are not streamed")

    def release(self) -> None:
        self._inner.release()


def native_request(
    operation: Operation, route: RouteSnap, payload: dict[str, Any]
) -> tuple[str, bytes]:
    """A Gemini provider's (method and query, body) for a Gemini client's request: the body as
    the client sent it, with the model named inside it (countTokens' generateContentRequest,
    each request of a batch, embedContent's optional `model`) rewritten to the upstream one."""
    model = f"models/{route.upstream_model}"
    body = payload
    if operation is Operation.GEMINI_COUNT_TOKENS:
        inner = field(payload, "generateContentRequest")
        if isinstance(inner, dict) and "model" in inner:
            body = {**payload, "generateContentRequest": {**inner, "model": model}}
    elif operation is Operation.GEMINI_BATCH_EMBED:
        requests = payload.get("requests")
        if isinstance(requests, list):
            rewritten = [{**r, "model": model} if isinstance(r, dict) else r for r in requests]
            body = {**payload, "requests": rewritten}
    elif operation is Operation.GEMINI_EMBED and "model" in payload:
        body = {**payload, "model": model}
    return _METHODS[operation], orjson.dumps(body)


_METHODS: Final = {
    Operation.GEMINI_GENERATE: "generateContent",
    Operation.GEMINI_STREAM: "streamGenerateContent?alt=sse",
    Operation.GEMINI_COUNT_TOKENS: "countTokens",
    Operation.GEMINI_EMBED: "embedContent",
    Operation.GEMINI_BATCH_EMBED: "batchEmbedContents",
}

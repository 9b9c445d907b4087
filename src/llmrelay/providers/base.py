"""The small interface every provider adapter and transport implements."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Protocol

from llmrelay.snapshot.model import ProviderSnap, RouteSnap


class Operation(StrEnum):
    CHAT = "chat"
    EMBEDDINGS = "embeddings"
    #: Anthropic Messages (POST /v1/messages): native for anthropic providers, bridged
    #: through chat for the others.
    MESSAGES = "messages"
    #: Anthropic's POST /v1/messages/count_tokens (anthropic providers only).
    COUNT_TOKENS = "count_tokens"
    #: OpenAI Responses (POST /v1/responses): native where the provider serves it, bridged
    #: through chat elsewhere.
    RESPONSES = "responses"
    #: POST /v1/responses/compact: only where the provider serves the Responses API.
    RESPONSES_COMPACT = "responses_compact"
    #: Gemini's generateContent, streamGenerateContent, countTokens, embedContent and
    #: batchEmbedContents (POST /v1beta/models/MODEL:METHOD): native for gemini providers,
    #: bridged through chat (embeddings) for the others (providers/gemini_bridge.py); token
    #: counts only from gemini providers.
    GEMINI_GENERATE = "gemini_generate"
    GEMINI_STREAM = "gemini_stream"
    GEMINI_COUNT_TOKENS = "gemini_count_tokens"
    GEMINI_EMBED = "gemini_embed"
    GEMINI_BATCH_EMBED = "gemini_batch_embed"
    #: OpenAI's POST /v1/images/generations, for an image model (ModelSnap.image): only the
    #: subscription-backed `gpt-image-2` of openai_codex providers serves it for now.
    IMAGES = "images"


class UnsupportedOperation(LookupError):
    """The provider has no such endpoint (embeddings on a chat-only API): the next route."""


class UpstreamRequest:
    """What to send a provider. Never changed once built; a plain class, not a dataclass,
    because one is built per call and under mypyc a dataclass keeps a Python `__init__`
    (llmrelay/compiled_modules.py)."""

    __slots__ = ("body", "dropped", "headers", "method", "translate", "url")

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        translate: Callable[[UpstreamResponse], UpstreamResponse] | None = None,
        method: str = "POST",
        dropped: tuple[str, ...] = (),
    ) -> None:
        self.url = url
        self.headers = headers
        self.body = body
        #: For a provider that does not speak the client's protocol: wraps its response so
        #: it reads as the client's protocol (bodies, stream chunks and errors alike).
        self.translate = translate
        self.method = method
        #: The client's fields the translation left out (gateway/dropped.py names them in
        #: the answer's `x-llmrelay-dropped` header).
        self.dropped = dropped


class UpstreamResponse(Protocol):
    status: int

    def header(self, name: str) -> str | None: ...

    async def read(self) -> bytes:
        """The whole body (the transport bounds the gaps between reads)."""
        ...

    async def next_chunk(self) -> bytes:
        """The next body bytes as they arrive, b"" at the end (the caller adds its own
        first-token and idle limits)."""
        ...

    def release(self) -> None:
        """Give the connection back (or drop it, if the body was not read to the end)."""
        ...


class Transport(Protocol):
    async def send(self, request: UpstreamRequest, provider: ProviderSnap) -> UpstreamResponse:
        """Send and wait for the response head, within the provider's connect and first-byte
        limits; raise providers.errors.UpstreamError subclasses on failure."""
        ...


class Adapter(Protocol):
    #: The wire protocol the provider answers in ("openai" for now).
    protocol: str

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest: ...

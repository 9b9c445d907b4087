"""The small interface every provider adapter and transport implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from llmrelay.snapshot.model import ProviderSnap, RouteSnap


class Operation(StrEnum):
    CHAT = "chat"
    EMBEDDINGS = "embeddings"


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    url: str
    headers: Mapping[str, str]
    body: bytes


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

"""A provider's response made to read as OpenAI Chat Completions.

An adapter for a provider that speaks another protocol (Anthropic Messages, Gemini) wraps the
transport's response in `TranslatedResponse`: its body reads as a chat completion, its error
bodies as OpenAI errors, and its stream as `data: {chunk}` events. Everything downstream of
the adapter (retries, failover, the stream relay with its read-ahead, finish and usage
rules, the model rename) then works unchanged for every provider.

A decoder may also write the client's stream directly (`DirectChatDecoder`): told the terms
the chat relay would apply (the virtual model's name, whether the usage chunk goes on, when
the stream is complete), it writes the final chat events and reports what they hold in
`StreamFacts`, so the relay passes them on without reading them a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol, cast

import orjson
import structlog

from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError

log = structlog.get_logger(__name__)

_CONTEXT_TOO_LONG: Final = "context_length_exceeded"
#: Not JSON: what the relay drops and counts as a malformed event.
_MALFORMED: Final = b"data: !\n\n"


def _render(chunk: dict[str, Any] | bytes | None) -> bytes:
    if chunk is None:
        return _MALFORMED
    if isinstance(chunk, bytes):
        return chunk  # the decoder wrote the event itself
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class ChatDecoder(Protocol):
    """One response's translation (a new decoder per call: stream decoders keep state)."""

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """A successful non-stream body -> chat.completion."""
        ...

    def error(self, status: int, raw: bytes) -> tuple[str, str | None]:
        """An error body -> (message, OpenAI-style code or None)."""
        ...

    def retry_after(self, raw: bytes) -> str | None:
        """A retry hint the provider puts in its error body rather than a header, as a
        `Retry-After` value (seconds), or None."""
        ...

    def chunks(self, chunk: bytes) -> list[dict[str, Any] | bytes | None]:
        """Stream bytes as they came -> chat.completion.chunk dicts (may be none yet), or
        their `data: ` events already as bytes; None for an upstream event that could not
        be read (the relay drops and counts it)."""
        ...

    def end(self) -> list[dict[str, Any] | bytes | None]:
        """The upstream stream ended -> its last chunks (a usage chunk, say)."""
        ...


class StreamFacts:
    """What the chat events written so far hold, as the chat relay would have read them.
    Cumulative: the relay reads them after every chunk (and at the end of the stream).
    (Plain classes here, not dataclasses: one of each per stream; see UpstreamRequest.)"""

    __slots__ = ("complete", "content", "events", "finished")

    def __init__(self) -> None:
        #: Chat events written (the record's count of events delivered).
        self.events = 0
        #: Whether any event carried content: text, a tool call, a finish reason or usage
        #: (the first one commits the stream to its route).
        self.content = False
        #: Whether the finish reason was written.
        self.finished = False
        #: Whether the stream is complete (finish reason, and the usage when it is wanted):
        #: nothing more is written after it.
        self.complete = False


class StreamTerms:
    """What the chat relay would do to a translated stream, for a decoder to do it first."""

    __slots__ = ("end_at_finish", "forward_usage", "model", "on_malformed", "on_usage")

    def __init__(
        self,
        *,
        model: str,
        forward_usage: bool,
        end_at_finish: bool,
        on_usage: Callable[[dict[str, Any]], None],
        on_malformed: Callable[[], None],
    ) -> None:
        #: The name every chunk carries (the virtual model's).
        self.model = model
        #: Whether the usage chunk reaches the client (it always reaches `on_usage`).
        self.forward_usage = forward_usage
        #: Whether the stream is complete at its finish reason (no usage awaited).
        self.end_at_finish = end_at_finish
        self.on_usage = on_usage
        #: An upstream event that could not be read (dropped and counted).
        self.on_malformed = on_malformed


class DirectChatDecoder(ChatDecoder, Protocol):
    """A decoder that can write the client's chat stream itself (see the module's doc)."""

    def direct(self, terms: StreamTerms) -> StreamFacts:
        """Write by `terms` from now on; the facts are updated by every `write`."""
        ...

    def write(self, chunk: bytes) -> bytes:
        """Stream bytes as they came -> the client's chat events (maybe none yet). Raises
        UpstreamErrorEvent for the provider's error event."""
        ...


class TranslatedResponse:
    """An UpstreamResponse whose bytes are the chat protocol's."""

    def __init__(self, inner: UpstreamResponse, decoder: ChatDecoder) -> None:
        self._inner = inner
        self._decoder = decoder
        self._ended = False
        self._retry_after: str | None = None
        self._facts: StreamFacts | None = None
        self.status = inner.status
        #: The chat completion `read` wrote (a successful answer), so the reader need not
        #: parse the bytes it was just serialised to.
        self.completion: dict[str, Any] | None = None

    def direct(self, terms: StreamTerms) -> StreamFacts | None:
        """Have the decoder write the client's chat events by `terms`, if it can; then
        `next_chunk` gives them and the facts say what they hold (None: it cannot, and the
        chunks must be examined as a provider's)."""
        if not hasattr(self._decoder, "direct"):
            return None
        decoder = cast(DirectChatDecoder, self._decoder)
        self._facts = facts = decoder.direct(terms)
        return facts

    def header(self, name: str) -> str | None:
        found = self._inner.header(name)
        if found is None and name.lower() == "retry-after":
            return self._retry_after  # from the error body, once read
        return found

    async def read(self) -> bytes:
        raw = await self._inner.read()
        if self.status >= 300:
            self._retry_after = self._decoder.retry_after(raw)
            message, code = self._decoder.error(self.status, raw)
            error: dict[str, Any] = {"message": message, "type": _error_type(self.status)}
            if code is not None:
                error["code"] = code
            return orjson.dumps({"error": error})
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError("the answer is not valid JSON") from None
        if not isinstance(body, dict):
            raise UpstreamProtocolError("the answer is not a JSON object")
        try:
            self.completion = completion = self._decoder.completion(body)
            return orjson.dumps(completion)
        except (KeyError, TypeError, ValueError) as exc:
            raise UpstreamProtocolError(
                f"the answer is not in the provider's shape: {exc}"
            ) from None

    async def next_chunk(self) -> bytes:
        """The next chat events; b"" only at the end (an upstream chunk that completes no
        event is not an end: reading goes on)."""
        if self._facts is not None:
            return await self._next_direct(self._facts)
        while not self._ended:
            chunk = await self._inner.next_chunk()
            if chunk:
                events = self._decoder.chunks(chunk)
            else:
                self._ended = True
                events = self._decoder.end()
            if events:
                return b"".join(_render(e) for e in events)
        return b""

    async def _next_direct(self, facts: StreamFacts) -> bytes:
        """`next_chunk` for a decoder writing the client's events. b"" also once the stream
        is complete (the relay knows that from the facts, and reads no further)."""
        decoder = cast(DirectChatDecoder, self._decoder)
        while not self._ended and not facts.complete:
            chunk = await self._inner.next_chunk()
            if not chunk:
                self._ended = True
                return b""
            events = decoder.write(chunk)
            if events:
                return events
        return b""

    def release(self) -> None:
        self._inner.release()


def error_event(message: str, kind: str) -> dict[str, Any]:
    """A provider's in-stream error as the chat protocol's error event (the relay fails the
    route before the first byte, or ends the client's stream with an error after it)."""
    return {"error": {"message": message, "type": kind}}


def context_code(message: str) -> str | None:
    """OpenAI's code for "the prompt is too long", when another provider said so in words
    (context fallbacks key on it)."""
    text = message.lower()
    if "too long" in text or "exceeds the maximum number of tokens" in text:
        return _CONTEXT_TOO_LONG
    return None


def _error_type(status: int) -> str:
    if status in (400, 404, 413, 422):
        return "invalid_request_error"
    if status in (401, 403):
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    return "api_error"

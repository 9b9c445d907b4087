"""Relaying a Gemini stream (streamGenerateContent) to a Gemini client, response by response.

The upstream is asked for server-sent events always (`alt=sse`): a Gemini provider's own, or
events translated from chat (providers.gemini_bridge). Each event is a whole
GenerateContentResponse: it is parsed, its `modelVersion` renamed to the virtual model, its
usageMetadata (cumulative: the last one is the total) taken for the record. Content is a part
of a candidate or a finish reason; the stream is complete once every candidate seen has its
finishReason (or the prompt was blocked), and ends there at once. An `error` event fails the
route before the first byte, and reaches the client as Google's error after it.

The client asked for one of two framings: `alt=sse` gets `data: {...}` events, as Google
writes them; without it Google streams one JSON array, `[{...}` then `,\\r\\n{...}` and a
closing `]`, which `as_array` switches to (the events read while priming included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import GatewayError
from llmrelay.gateway.stream_relay import ParsedEventRelay
from llmrelay.protocols import gemini, gemini_models
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamErrorEvent
from llmrelay.snapshot.model import RouteSnap

_SSE_START: Final = b"data: "
_SSE_END: Final = b"\r\n\r\n"


class GeminiStreamRelay(ParsedEventRelay):
    def __init__(
        self,
        route: RouteSnap,
        response: UpstreamResponse,
        *,
        request_id: str,
        virtual_model: str,
        record: CallRecord,
        on_malformed: Callable[[], None],
        on_end: Callable[[CallRecord], None],
    ) -> None:
        super().__init__(
            route,
            response,
            request_id=request_id,
            virtual_model=virtual_model,
            record=record,
            on_malformed=on_malformed,
            on_end=on_end,
        )
        self._started: set[int] = set()
        self._finished: set[int] = set()
        #: The client's framing: server-sent events, or one JSON array.
        self._array = False
        #: Whether an event went out in the array yet (the first opens it).
        self._opened = False

    def as_array(self) -> None:
        """Write the stream as Google's JSON array (a client that did not ask `alt=sse`),
        the events already read included."""
        self._array = True
        primed = self._primed
        self._primed = [self._frame(e[len(_SSE_START) : -len(_SSE_END)]) for e in primed]

    def _frame(self, data: bytes) -> bytes:
        if not self._array:
            return _SSE_START + data + _SSE_END
        if self._opened:
            return b",\r\n" + data
        self._opened = True
        return b"[" + data

    def _closing(self) -> bytes:
        if not self._array:
            return b""
        return b"]" if self._opened else b"[]"

    def _error_event(self, error: GatewayError) -> bytes:
        body = gemini_models.error_body(
            error.status, error.message, reason=error.code, request_id=self._request_id
        )
        if not self._array:
            return _SSE_START + body + _SSE_END
        return (b",\r\n" if self._opened else b"[") + body + b"]"

    def _ended_early_is_complete(self) -> bool:
        # Gemini writes no end marker: an upstream that closed after every candidate's
        # finish reason is complete (the check at the finish normally ends it first).
        return bool(self._started) and self._finished >= self._started

    def _pass(self, name: str | None, event: dict[str, Any], data: bytes, out: list[bytes]) -> bool:
        error = event.get("error")
        if error is not None:
            message = gemini.error_message(event) or str(error)
            raise UpstreamErrorEvent(message[:200])
        content = self._look(event)
        if "modelVersion" in event:
            event["modelVersion"] = self._virtual_model
        self._taken += 1
        out.append(self._frame(orjson.dumps(event)))
        return content

    def _look(self, event: dict[str, Any]) -> bool:
        """Take usage and the end from one response; whether it carried content."""
        metadata = event.get("usageMetadata")
        if isinstance(metadata, dict):
            self._record.take_usage(gemini.chat_usage(metadata))
        candidates = event.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            feedback = event.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason"):
                self._ended = True  # a refused prompt: its only event
                return True
            return False
        carried = False
        for position, candidate in enumerate(candidates):
            if not isinstance(candidate, dict):
                continue
            index = candidate.get("index", position)
            self._started.add(index)
            content = candidate.get("content")
            if isinstance(content, dict) and content.get("parts"):
                carried = True
            if candidate.get("finishReason"):
                self._finished.add(index)
                carried = True
        if self._finished >= self._started:
            self._ended = True
        return carried

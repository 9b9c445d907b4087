"""Relaying an OpenAI Responses stream to a Responses client, event by event.

The upstream stream is OpenAI's own (a provider that serves the Responses API) or one
translated from chat (providers.responses_bridge). Content is a text or function-argument
delta, or a function call item being added; the stream is complete at `response.completed`,
`response.incomplete` or `response.failed`. Every event is parsed; the response object some
events carry has its model renamed to the virtual model and its id remembered (a later
request's `previous_response_id` goes back to the route that holds it). An `error` event
fails the route before the first byte and reaches the client after it.

When the route's provider does not store responses (a chat-only provider, a Codex
subscription) and the request did not say `store: false`, the gateway keeps the Response as
it does a non-streamed one (`keep`, shared/conversations.py): the stream's Response gets an
id of the gateway's own from its first event on, and the completed (or incomplete) Response
is kept before its last event reaches the client.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Final

import orjson
import structlog

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import GatewayError
from llmrelay.gateway.stream_relay import ParsedEventRelay
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.presets import stores_responses
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

_CONTENT_DELTAS: Final = frozenset(
    {
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.refusal.delta",
        "response.reasoning_summary_text.delta",
    }
)
_ENDS: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})
#: Ends whose Response the gateway keeps (a failed one is an error, as when not streamed).
_KEPT: Final = frozenset({"response.completed", "response.incomplete"})
#: Output items that are a tool call (a call written whole, as a custom tool's is when
#: translated from chat, has no delta: its item is the content).
_CALLS: Final = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "apply_patch_call"}
)


class ResponsesStreamRelay(ParsedEventRelay):
    def __init__(
        self,
        route: RouteSnap,
        response: UpstreamResponse,
        *,
        request_id: str,
        virtual_model: str,
        record: CallRecord,
        on_malformed: Callable[[], None],
        on_response_id: Callable[[RouteSnap, str], None],
        on_end: Callable[[CallRecord], None],
        keep: Callable[[str, dict[str, Any]], None] | None = None,
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
        self._on_response_id = on_response_id
        self._sequence = 0
        #: Where the gateway keeps a Response it stores itself (None: `store: false`), and
        #: the id it gave the stream's Response (None: the provider's own is kept).
        self._keep = keep
        self._own_id: str | None = None

    def _error_event(self, error: GatewayError) -> bytes:
        self._sequence += 1
        data = {
            "type": "error",
            "code": error.code,
            "message": error.message,
            "param": None,
            "sequence_number": self._sequence,
        }
        return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"

    def _event(self, kind: str, event: dict[str, Any], data: bytes) -> tuple[bytes, bool]:
        sequence = event.get("sequence_number")
        if isinstance(sequence, int):
            self._sequence = sequence
        if isinstance(event.get("response"), dict):
            ended = self._look(kind, event)  # renames the model: written anew
            return orjson.dumps(event), ended
        if kind in _CONTENT_DELTAS or kind == "response.output_item.added":
            return data, _carries_content(kind, event)
        return data, False

    def _look(self, kind: Any, event: dict[str, Any]) -> bool:
        """Rename and read an event that carries the response object; whether it ended the
        stream (an end counts as content)."""
        response = event.get("response")
        if not isinstance(response, dict):
            return False
        response["model"] = self._virtual_model
        if self._keep is not None:
            if self._own_id is None and kind == "response.created":
                provider = self._route.provider
                if not stores_responses(provider.type, provider.preset):
                    self._own_id = "resp_" + secrets.token_hex(16)
            if self._own_id is not None:
                response["id"] = self._own_id
                response["store"] = True
        response_id = response.get("id")
        if isinstance(response_id, str) and kind == "response.created":
            self._on_response_id(self._route, response_id)
        if kind in _ENDS:
            self._ended = True
            self._record.take_responses_usage(response.get("usage"))
            if self._own_id is not None and self._keep is not None and kind in _KEPT:
                self._keep(self._own_id, response)
        return kind in _ENDS


def _carries_content(kind: Any, event: dict[str, Any]) -> bool:
    if kind == "response.output_item.added":
        item = event.get("item")
        return isinstance(item, dict) and item.get("type") in _CALLS
    return bool(event.get("delta"))

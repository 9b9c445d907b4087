"""What a mid-stream rescue (gateway/rescue_events.py) reads and writes of a Gemini stream
(streamGenerateContent): the client's one candidate of text parts, then the continuation's
text as more responses of that candidate (the same `responseId`), and a last response with
the finish reason and the usage of every route summed.

Exact only while there is one candidate whose parts are plain text: a thought, a function
call or several candidates refuse the rescue, as does a candidate already finished."""

from __future__ import annotations

from typing import Any

import orjson

from llmrelay.gateway.rescue_events import EventTranscript
from llmrelay.protocols import gemini
from llmrelay.protocols.gemini_chat import gemini_request_to_chat
from llmrelay.protocols.gemini_chat_answer import finish_reason, usage_metadata


class GeminiTranscript(EventTranscript):
    def __init__(self) -> None:
        super().__init__()
        self.response_id: Any = None

    def _read(self, name: str | None, event: dict[str, Any]) -> None:
        metadata = event.get("usageMetadata")
        if type(metadata) is dict:
            self.reported = gemini.chat_usage(metadata)  # cumulative: the last is the total
        if self.response_id is None:
            self.response_id = event.get("responseId")
        candidates = event.get("candidates")
        if not candidates:
            if event.get("promptFeedback"):
                self.finished = True
            return
        if type(candidates) is not list or len(candidates) != 1:
            self.exact = False
            return
        candidate = candidates[0]
        if type(candidate) is not dict or candidate.get("index", 0) != 0:
            self.exact = False
            return
        content = candidate.get("content")
        parts = content.get("parts") if type(content) is dict else None
        for part in parts if type(parts) is list else ():
            text = part.get("text") if type(part) is dict else None
            if type(text) is not str or len(part) != 1:
                self.exact = False  # a thought, a function call, a signature...
                return
            self.add(text)
        if candidate.get("finishReason"):
            self.finished = True

    def chat_form(self, payload: dict[str, Any]) -> dict[str, Any]:
        chat, _dropped = gemini_request_to_chat(payload, upstream_model="", stream=True)
        return chat

    def _response(self, candidate: dict[str, Any], **more: Any) -> bytes:
        event = {
            "candidates": [candidate],
            **more,
            "modelVersion": "",
            "responseId": self.response_id,
        }
        return b"data: " + orjson.dumps(event) + b"\r\n\r\n"

    def text_event(self, text: str) -> bytes:
        return self._response({"content": {"role": "model", "parts": [{"text": text}]}, "index": 0})

    def closing(self, text: str, finish: str, usage: dict[str, Any]) -> bytes:
        candidate = {
            "content": {"role": "model", "parts": [{"text": ""}]},
            "finishReason": finish_reason(finish),
            "index": 0,
        }
        return self._response(candidate, usageMetadata=usage_metadata(usage))

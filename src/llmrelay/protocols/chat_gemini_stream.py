"""Gemini streamGenerateContent?alt=sse -> Chat Completions chunks.

Each SSE event of Gemini's stream is a whole GenerateContentResponse holding the next
slice of each candidate: text pieces, function calls (always whole, never split across
events), a finishReason on the candidate's last slice, and usageMetadata that is cumulative
(the last one seen is the total). Thought parts and signatures go out as reasoning deltas
(`reasoning_content`, `reasoning_details`: gemini_reasoning.py). Chat wants a role chunk
first, content deltas, tool call deltas numbered across the stream, a chunk with
finish_reason, and with stream_options.include_usage a last chunk with no choices and the
usage.
"""

from __future__ import annotations

import time
from typing import Any

from llmrelay.protocols import gemini, gemini_reasoning


class GeminiStreamToChat:
    """One translator per streamed answer; feed it each event's parsed data in order."""

    __slots__ = (
        "_calls",
        "_done",
        "_started",
        "created",
        "finished",
        "id",
        "include_usage",
        "model",
        "usage",
    )

    def __init__(self, *, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.created = int(time.time())
        self.id: str | None = None
        #: True once every candidate seen has carried a finishReason (with one candidate,
        #: as soon as it has): a stream that ends before this was cut off.
        self.finished = False
        #: Chat usage from the last usageMetadata seen, None until one arrives.
        self.usage: dict[str, Any] | None = None
        self._started: set[int] = set()
        self._done: set[int] = set()
        self._calls: dict[int, int] = {}

    def feed(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks for one GenerateContentResponse of the stream."""
        if self.id is None:
            self.id = gemini.new_completion_id(data.get("responseId"))
        metadata = data.get("usageMetadata")
        if isinstance(metadata, dict):
            self.usage = gemini.chat_usage(metadata)
        chunks: list[dict[str, Any]] = []
        candidates = data.get("candidates")
        if not candidates:
            # A refused prompt: the stream's only event carries promptFeedback.blockReason.
            if (data.get("promptFeedback") or {}).get("blockReason") and not self._started:
                chunks.append(self._chunk(0, {"role": "assistant", "content": ""}))
                chunks.append(self._chunk(0, {}, "content_filter"))
                self._started.add(0)
                self._done.add(0)
                self.finished = True
            return chunks
        for position, candidate in enumerate(candidates):
            chunks.extend(self._candidate(candidate, position))
        self.finished = self._done >= self._started
        return chunks

    def _candidate(self, candidate: dict[str, Any], position: int) -> list[dict[str, Any]]:
        index = candidate.get("index", position)
        if index in self._done:
            return []
        chunks: list[dict[str, Any]] = []
        if index not in self._started:
            self._started.add(index)
            chunks.append(self._chunk(index, {"role": "assistant", "content": ""}))
        for part in (candidate.get("content") or {}).get("parts") or []:
            text = gemini.visible_text(part)
            if text is not None:
                chunks.append(self._chunk(index, {"content": text}))
            reasoning = _reasoning_delta(part)
            if reasoning is not None:
                chunks.append(self._chunk(index, reasoning))
            if text is not None:
                continue
            call = gemini.chat_tool_call(part)
            if call is not None:
                count = self._calls.get(index, 0)
                self._calls[index] = count + 1
                chunks.append(self._chunk(index, {"tool_calls": [{"index": count, **call}]}))
        reason = candidate.get("finishReason")
        if reason:
            self._done.add(index)
            tool_calls = self._calls.get(index, 0) > 0
            finish = gemini.finish_reason(reason, tool_calls=tool_calls)
            chunks.append(self._chunk(index, {}, finish))
        return chunks

    def finish(self) -> list[dict[str, Any]]:
        """At the end of the upstream stream: the usage chunk, if asked for and known."""
        if not self.include_usage or self.usage is None:
            return []
        return [{**self._head(), "choices": [], "usage": self.usage}]

    def _head(self) -> dict[str, Any]:
        if self.id is None:
            self.id = gemini.new_completion_id(None)
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
        }

    def _chunk(
        self, index: int, delta: dict[str, Any], finish_reason: str | None = None
    ) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        chunk = {**self._head(), "choices": [choice]}
        if self.include_usage:
            # As OpenAI streams with include_usage: every chunk but the last has usage null.
            chunk["usage"] = None
        return chunk


def _reasoning_delta(part: dict[str, Any]) -> dict[str, Any] | None:
    """A thought part, or the signature on a part that is not a function call (its own goes
    with the tool call), as a chat delta's reasoning (gemini_reasoning.py)."""
    if "functionCall" in part:
        return None
    reasoning, details = gemini_reasoning.details_of_parts([part])
    if not details:
        return None
    delta: dict[str, Any] = {"reasoning_details": details}
    if reasoning:
        delta["reasoning_content"] = reasoning
    return delta

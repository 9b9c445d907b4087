"""Chat Completions chunks as Gemini's stream (streamGenerateContent): one
GenerateContentResponse per event, for a Gemini client of a provider reached through chat.

Text and thoughts go out as they come, one part an event. Tool calls are gathered: chat
streams their arguments in pieces, Gemini sends each function call whole, so they go out
together once the choice has finished. The last event carries each candidate's
finishReason and the usageMetadata: it is written when the chat stream has given both (the
usage chunk follows the finish reason when `include_usage` was asked for, which the bridge
always asks), or at the end of the stream with what came. Reasoning details are gathered
too and packed onto the first function call, else onto an empty text part of the last event
(gemini_reasoning.py), for the client to send back.
"""

from __future__ import annotations

from typing import Any

from llmrelay.protocols import gemini_reasoning
from llmrelay.protocols.gemini_chat_answer import (
    answer_parts,
    finish_reason,
    response_id,
    usage_metadata,
)


class _Choice:
    __slots__ = ("calls", "details", "finish")

    def __init__(self) -> None:
        #: Tool calls by their chat index: the first delta's id, name and extra_content, the
        #: arguments joined.
        self.calls: dict[int, dict[str, Any]] = {}
        self.details: list[dict[str, Any]] = []
        self.finish: str | None = None


class ChatStreamToGemini:
    """One translator per streamed answer; feed it each chat chunk in order, then `finish`."""

    def __init__(self, *, model: str, include_thoughts: bool) -> None:
        self._model = model
        self._include_thoughts = include_thoughts
        self._id: str | None = None
        self._choices: dict[int, _Choice] = {}
        self._usage: dict[str, Any] | None = None
        self._ended = False

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if self._ended:
            return []
        if self._id is None:
            self._id = response_id(chunk.get("id"))
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            state = self._choices.setdefault(index, _Choice())
            delta = choice.get("delta") or {}
            parts: list[dict[str, Any]] = []
            reasoning = delta.get("reasoning_content")
            if self._include_thoughts and isinstance(reasoning, str) and reasoning:
                parts.append({"text": reasoning, "thought": True})
            gemini_reasoning.merge_details(state.details, delta.get("reasoning_details"))
            content = delta.get("content")
            if isinstance(content, str) and content:
                parts.append({"text": content})
            for call in delta.get("tool_calls") or []:
                _gather(state, call)
            if parts:
                events.append(self._event([self._candidate(index, parts)]))
            if choice.get("finish_reason"):
                state.finish = str(choice["finish_reason"])
        if self._choices and all(c.finish for c in self._choices.values()) and self._usage:
            events.append(self._last())
        return events

    def finish(self) -> list[dict[str, Any]]:
        """The end of the chat stream: the last event, if it has not gone yet and the
        answer finished (a stream cut before its finish reason gets none: the relay reports
        it broken off)."""
        if self._ended or not self._choices or not all(c.finish for c in self._choices.values()):
            return []
        return [self._last()]

    def _last(self) -> dict[str, Any]:
        self._ended = True
        candidates = []
        for index, state in sorted(self._choices.items()):
            calls = [state.calls[k] for k in sorted(state.calls)]
            parts = answer_parts(
                text="",
                calls=calls,
                reasoning=None,
                details=state.details,
                include_thoughts=False,
            )
            candidate = self._candidate(index, parts)
            candidate["finishReason"] = finish_reason(state.finish)
            candidates.append(candidate)
        event = self._event(candidates)
        metadata = usage_metadata(self._usage)
        if metadata is not None:
            event["usageMetadata"] = metadata
        return event

    def _candidate(self, index: int, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"content": {"role": "model", "parts": parts}, "index": index}

    def _event(self, candidates: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "candidates": candidates,
            "modelVersion": self._model,
            "responseId": self._id or "llmrelay",
        }


def _gather(state: _Choice, delta: Any) -> None:
    if not isinstance(delta, dict):
        return
    index = delta.get("index", len(state.calls))
    call = state.calls.get(index)
    function = delta.get("function") or {}
    if call is None:
        call = state.calls[index] = {
            "id": delta.get("id"),
            "type": "function",
            "function": {"name": function.get("name") or "", "arguments": ""},
        }
        if delta.get("extra_content") is not None:
            call["extra_content"] = delta["extra_content"]
    elif function.get("name") and not call["function"]["name"]:
        call["function"]["name"] = function["name"]
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        call["function"]["arguments"] += arguments

"""What a mid-stream rescue (gateway/rescue.py) knows before it asks another route: what the
client was sent (`Transcript`), whether that is a point the answer can be continued from
exactly (`refusal`), which providers continue a final assistant message (`can_continue`) and
the request they are sent (`continuation_payload`)."""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols.sse import SSEParser
from llmrelay.snapshot.model import ProviderSnap

#: Delta fields whose partial value cannot be handed on exactly as a prefill.
NOT_TEXT: Final = ("tool_calls", "function_call", "refusal", "reasoning_content", "reasoning")
#: The most rescues of one stream (each a further route).
MAX_RESCUES: Final = 2


def can_continue(provider: ProviderSnap) -> bool:
    """Whether a provider continues a final assistant message rather than answering anew:
    Anthropic always does (a prefill); an OpenAI-compatible server only when it is known to
    take `continue_final_message` (vLLM). Other APIs (OpenAI itself, Azure, Gemini through
    the chat bridge) would start a new answer: they are never asked to continue."""
    return provider.type == "anthropic" or (
        provider.type == "openai_compatible" and provider.preset == "vllm"
    )


def continuation_payload(
    payload: dict[str, Any], provider: ProviderSnap, prefill: str
) -> dict[str, Any]:
    """The client's request with the text already sent as the final assistant message."""
    messages = list(payload.get("messages") or [])
    messages.append({"role": "assistant", "content": prefill})
    continued = {**payload, "messages": messages}
    if provider.type == "openai_compatible":
        continued["add_generation_prompt"] = False
        continued["continue_final_message"] = True
    return continued


class Transcript:
    """What the client was sent of a one-choice chat stream, read from the bytes it got."""

    __slots__ = ("created", "exact", "fingerprint", "finished", "id", "parser", "pieces", "texts")

    def __init__(self) -> None:
        self.parser = SSEParser()
        self.pieces: list[str] = []
        self.id: Any = None
        self.created: Any = None
        self.fingerprint: Any = None
        #: False once anything was sent that a prefill cannot carry exactly.
        self.exact = True
        self.finished = False
        #: Content events sent (about a token each: the broken part's output estimate).
        self.texts = 0

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def feed(self, part: bytes) -> None:
        for _name, data in self.parser.feed(part):
            if not data or data == b"[DONE]":
                continue
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                self.exact = False
                continue
            if type(event) is not dict:
                continue
            if self.id is None:
                self.id = event.get("id")
                self.created = event.get("created")
                self.fingerprint = event.get("system_fingerprint")
            if event.get("usage"):
                self.finished = True
            self._choices(event.get("choices"))

    def _choices(self, choices: Any) -> None:
        if not choices:
            return
        if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
            self.exact = False
            return
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finished = True
        if choice.get("logprobs"):
            self.exact = False
        delta = choice.get("delta")
        if type(delta) is not dict:
            return
        if any(delta.get(field) for field in NOT_TEXT):
            self.exact = False
        content = delta.get("content")
        if type(content) is str and content:
            self.pieces.append(content)
            self.texts += 1


def refusal(transcript: Transcript, choices: int, rescues: int) -> str | None:
    """Why a stream cannot be rescued (None: it can)."""
    if choices != 1:
        return "several choices"
    if rescues >= MAX_RESCUES:
        return "rescued too often"
    if not transcript.exact:
        return "not plain text: the continuation point cannot be verified"
    if transcript.finished:
        return "the answer had finished"
    if not transcript.text.strip():
        return "no text yet"
    return None

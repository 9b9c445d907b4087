"""What a mid-stream rescue (gateway/rescue.py) knows before it asks another route: what the
client was sent (`Transcript`), whether that is a point the answer can be continued from
exactly (`refusal`), which providers continue a final assistant message (`can_continue`),
the prefill each is given and what its continuation must begin with (`cut`, `Overlap`), and
the request they are sent (`continuation_payload`)."""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.snapshot.model import ProviderSnap

#: Delta fields whose partial value cannot be handed on exactly as a prefill.
NOT_TEXT: Final = ("tool_calls", "function_call", "refusal", "reasoning_content", "reasoning")
#: The most rescues of one stream (each a further route).
MAX_RESCUES: Final = 2


def can_continue(provider: ProviderSnap) -> bool:
    """Whether a provider continues a final assistant message rather than answering anew:
    Anthropic always does (a prefill); an OpenAI-compatible server only when it is known to
    take `continue_final_message` (vLLM); Gemini continues a final `model` turn, but does
    not promise to, so its continuation is checked (`cut`). Other APIs (OpenAI itself,
    Azure) would start a new answer: they are never asked to continue."""
    kind = provider.type
    return (
        kind == "anthropic"
        or kind == "gemini"
        or (kind == "openai_compatible" and provider.preset == "vllm")
    )


def cut(text: str, provider: ProviderSnap) -> tuple[str, str, bool] | None:
    """How the text sent is handed to `provider`: (the prefill, what its continuation must
    begin with before anything new, whether that is checked strictly). None: it cannot be
    handed there verifiably.

    Trailing whitespace is left out of every prefill (Anthropic refuses a prefill ending in
    it) and dropped from the continuation's start when it comes again. A Gemini route is
    given the text without its last word, which the continuation must then say again,
    exactly, before anything of it is passed on: a model that answered anew instead of
    continuing fails there, before the client sees a byte of it."""
    stripped = text.rstrip()
    if provider.type != "gemini":
        return stripped, text[len(stripped) :], False
    last = max(stripped.rfind(" "), stripped.rfind("\n"), stripped.rfind("\t"))
    prefill = stripped[:last].rstrip() if last > 0 else ""
    if not prefill:
        return None  # one word so far: nothing to check a continuation against
    return prefill, text[len(prefill) :], True


class Overlap:
    """The start a continuation owes before its new text (see `cut`): dropped as it comes;
    when strict, a continuation that says anything else fails (UpstreamProtocolError)."""

    __slots__ = ("expected", "held", "strict")

    def __init__(self, expected: str, strict: bool) -> None:
        self.expected = expected
        self.strict = strict
        self.held = ""

    def take(self, piece: str) -> str:
        """What of the continuation's next `piece` is new."""
        expected = self.expected
        if not expected or not piece:
            return piece
        if not self.strict:
            self.expected = ""
            return piece[len(expected) :] if piece.startswith(expected) else piece
        held = self.held + piece
        size = min(len(held), len(expected))
        if held[:size] != expected[:size]:
            raise UpstreamProtocolError("the continuation does not begin where the answer stopped")
        if len(held) < len(expected):
            self.held = held
            return ""
        self.expected = self.held = ""
        return held[len(expected) :]

    def finish(self) -> None:
        """The continuation finished: a strict start it never said fails it."""
        if self.strict and self.expected:
            raise UpstreamProtocolError("the continuation ended before where the answer stopped")


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

"""Small pieces every protocol of the scripted agent upstream shares: SSE framing, and text
cut into several deltas (so a client's stream accumulation is exercised, not one chunk)."""

from __future__ import annotations

from typing import Final

#: Characters per streamed delta.
PIECE: Final = 12


def pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def sse_data(data: bytes) -> bytes:
    """One `data:` event (OpenAI Chat Completions, Gemini)."""
    return b"data: " + data + b"\n\n"


def sse_event(name: str, data: bytes) -> bytes:
    """One named event (Anthropic Messages, OpenAI Responses)."""
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"

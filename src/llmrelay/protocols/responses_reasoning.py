"""Reasoning between Responses `reasoning` items and the hub's reasoning fields.

The hub (Chat Completions as llmrelay carries it) holds a model's reasoning as an assistant
message's `reasoning_content` (its text) and `reasoning_details` (what the provider needs
back: Anthropic thinking blocks with their signatures, format "anthropic-claude-v1"; Gemini
thoughts and thought signatures, "google-gemini-v1"), and a Gemini function call's own
signature as the tool call's `extra_content`. A Responses client keeps none of those: it
keeps `reasoning` items, and sends them back on the next turn when they carry
`encrypted_content` (Codex asks for it with `include: ["reasoning.encrypted_content"]`).

So the reasoning of an answer becomes one reasoning item whose `encrypted_content` packs the
details and the tool calls' extra content (`pack`, opaque to the client: base64 JSON after a
prefix, not encrypted; what it holds is signed by the provider, which checks it), and its
text the item's summary when the client asked for one (`reasoning.summary`). A reasoning
item the client sends back is unpacked (`unpack`) onto the assistant message it belongs to
and onto the tool calls it names. Reasoning items of another origin (OpenAI's own encrypted
reasoning) cannot be read by another provider: left out and named as dropped.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import orjson

__all__ = ["PREFIX", "Packed", "pack", "reasoning_item", "unpack"]

#: What starts an encrypted_content written by llmrelay (OpenAI's own has no ".").
PREFIX: Final = "llmrelay.responses.v1."


class Packed:
    """What one reasoning item carries: the hub's reasoning details and the tool calls'
    extra content (by call id)."""

    __slots__ = ("calls", "details")

    def __init__(
        self,
        details: list[dict[str, Any]] | None = None,
        calls: dict[str, Any] | None = None,
    ) -> None:
        self.details: list[dict[str, Any]] = details if details is not None else []
        self.calls: dict[str, Any] = calls if calls is not None else {}

    def __bool__(self) -> bool:
        return bool(self.details or self.calls)


def pack(packed: Packed) -> str:
    body: dict[str, Any] = {"details": packed.details}
    if packed.calls:
        body["calls"] = packed.calls
    return PREFIX + base64.urlsafe_b64encode(orjson.dumps(body)).decode()


def unpack(encrypted: Any) -> Packed | None:
    """The details and call extras an encrypted_content written by `pack` holds; None for
    anything else (OpenAI's own, or one that does not read back)."""
    if not isinstance(encrypted, str) or not encrypted.startswith(PREFIX):
        return None
    try:
        body = orjson.loads(base64.urlsafe_b64decode(encrypted[len(PREFIX) :]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    details = body.get("details")
    calls = body.get("calls")
    return Packed(
        [d for d in details if isinstance(d, dict)] if isinstance(details, list) else [],
        {k: v for k, v in calls.items() if isinstance(v, dict)} if isinstance(calls, dict) else {},
    )


def wants_summary(request: dict[str, Any]) -> bool:
    """Whether the client asked for reasoning summaries (`reasoning.summary`, or the older
    `generate_summary`), which is when the reasoning's text is shown to it."""
    reasoning = request.get("reasoning")
    if not isinstance(reasoning, dict):
        return False
    summary = reasoning.get("summary") or reasoning.get("generate_summary")
    return isinstance(summary, str) and summary != "none"


def reasoning_item(
    item_id: str, text: str, packed: Packed, *, summary: bool, status: str = "completed"
) -> dict[str, Any]:
    """A Responses reasoning output item."""
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": text}] if summary and text else [],
    }
    if packed:
        item["encrypted_content"] = pack(packed)
    item["status"] = status
    return item


def text_of_details(details: list[dict[str, Any]]) -> str:
    texts = []
    for detail in details:
        kind = detail.get("type")
        text = detail.get("text") if kind == "reasoning.text" else None
        if text is None and kind == "reasoning.summary":
            text = detail.get("summary")
        if isinstance(text, str):
            texts.append(text)
    return "".join(texts)

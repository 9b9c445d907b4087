"""Reasoning between an Anthropic Messages client and a provider reached through chat.

Anthropic carries a model's reasoning as `thinking` blocks whose `signature` the client must
send back unchanged on the next turn (a tool loop with thinking needs them). The hub (chat)
carries it as `reasoning_content` (text; `reasoning` on OpenRouter and newer vLLM),
`reasoning_details` (signed or encrypted pieces, each naming its `format`: Gemini's
thoughtSignatures are "google-gemini-v1", gemini_reasoning.py) and, for Gemini, a signature
on each tool call (`extra_content.google.thought_signature`).

So a chat answer's reasoning becomes a thinking block whose signature packs all of it
(`pack`: "llmrelay.thinking.v1." and base64url JSON; no Anthropic signature starts so), and
the thinking blocks of an assistant turn the client sends back are unpacked (`unpack_turn`)
into the same hub fields, so the provider gets its own reasoning back. A thinking block of
Anthropic's own signing (a conversation that began on an Anthropic route) is of no use to
another provider and is left out. `display: "omitted"` (Claude Code's) is honoured: the
thinking text is empty, the signature still carries everything.

Effort: Anthropic's `output_config.effort` (low, medium, high, xhigh, max) and a thinking
budget become chat's `reasoning_effort` (the Gemini adapter turns that into a
thinkingConfig budget: protocols/chat_gemini.py).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import orjson

from llmrelay.protocols.translation import TranslationError

#: What starts a thinking block's signature made by llmrelay.
PREFIX: Final = "llmrelay.thinking.v1."

#: output_config.effort -> reasoning_effort (chat has no "max": its highest is "xhigh").
EFFORTS: Final[dict[str, str]] = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "xhigh",
}


class Reasoning:
    """The reasoning of one assistant turn, as the hub carries it."""

    __slots__ = ("details", "signatures", "text")

    def __init__(self) -> None:
        self.text = ""
        self.details: list[dict[str, Any]] = []
        #: tool call id -> its thought signature (Gemini's)
        self.signatures: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self.text or self.details or self.signatures)

    def take_message(self, message: dict[str, Any]) -> None:
        """What a chat message (or a stream delta) carries: its reasoning text and details,
        and its tool calls' signatures."""
        text = message.get("reasoning_content")
        if not isinstance(text, str):
            text = message.get("reasoning")
        if isinstance(text, str):
            self.text += text
        details = message.get("reasoning_details")
        if isinstance(details, list):
            self.details.extend(d for d in details if isinstance(d, dict))
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict):
                self.take_call(call)

    def take_call(self, call: dict[str, Any]) -> None:
        extra = call.get("extra_content")
        google = extra.get("google") if isinstance(extra, dict) else None
        signature = google.get("thought_signature") if isinstance(google, dict) else None
        if isinstance(signature, str) and signature and isinstance(call.get("id"), str):
            self.signatures[call["id"]] = signature

    def block(self, display: str | None) -> dict[str, Any]:
        """The thinking block for this reasoning."""
        shown = "" if display == "omitted" else self.text
        return {"type": "thinking", "thinking": shown, "signature": pack(self)}


def pack(reasoning: Reasoning) -> str:
    held: dict[str, Any] = {}
    if reasoning.text:
        held["text"] = reasoning.text
    if reasoning.details:
        held["details"] = reasoning.details
    if reasoning.signatures:
        held["calls"] = reasoning.signatures
    return PREFIX + base64.urlsafe_b64encode(orjson.dumps(held)).decode()


def unpack(signature: Any) -> dict[str, Any] | None:
    """What a signature made by `pack` holds; None for any other (Anthropic's own)."""
    if not isinstance(signature, str) or not signature.startswith(PREFIX):
        return None
    try:
        held = orjson.loads(base64.urlsafe_b64decode(signature[len(PREFIX) :]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    return held if isinstance(held, dict) else None


def unpack_turn(blocks: list[Any], dropped: list[str]) -> Reasoning:
    """The reasoning an assistant turn's thinking blocks carry back (in any position:
    a stream may close with a second thinking block holding the tool calls' signatures).
    Blocks llmrelay did not sign are noted in `dropped` and left out."""
    reasoning = Reasoning()
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in ("thinking", "redacted_thinking"):
            continue
        held = unpack(block.get("signature")) if kind == "thinking" else None
        if held is None:
            if "messages.content.thinking" not in dropped:
                dropped.append("messages.content.thinking")
            continue
        text = held.get("text")
        if isinstance(text, str):
            reasoning.text += text
        details = held.get("details")
        if isinstance(details, list):
            reasoning.details.extend(d for d in details if isinstance(d, dict))
        calls = held.get("calls")
        if isinstance(calls, dict):
            reasoning.signatures.update(
                (k, v) for k, v in calls.items() if isinstance(k, str) and isinstance(v, str)
            )
    return reasoning


def restore(message: dict[str, Any], reasoning: Reasoning) -> None:
    """Put a turn's reasoning back on its chat assistant message."""
    if reasoning.text:
        message["reasoning_content"] = reasoning.text
    if reasoning.details:
        message["reasoning_details"] = reasoning.details
    for call in message.get("tool_calls") or ():
        signature = reasoning.signatures.get(call.get("id"))
        if signature is not None:
            call["extra_content"] = {"google": {"thought_signature": signature}}


def display_of(payload: dict[str, Any]) -> str | None:
    """`thinking.display` ("summarized" or "omitted"), or None when not said."""
    thinking = payload.get("thinking")
    display = thinking.get("display") if isinstance(thinking, dict) else None
    return display if isinstance(display, str) else None


def wants_thinking(payload: dict[str, Any]) -> bool:
    """Whether thinking blocks may be answered: not when the client turned thinking off."""
    thinking = payload.get("thinking")
    return not (isinstance(thinking, dict) and thinking.get("type") == "disabled")


def reasoning_effort(payload: dict[str, Any]) -> str | None:
    """chat's reasoning_effort for `output_config.effort` and `thinking`: the effort when
    given; else a budget by the bands Google documents for its OpenAI-compatible endpoint
    (up to 1K low, up to 8K medium, more high); adaptive or disabled thinking alone leaves
    the provider's default (adaptive is what reasoning models do unasked; "off" is not a
    level every model takes)."""
    config = payload.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    if effort is not None:
        if not isinstance(effort, str) or effort not in EFFORTS:
            raise TranslationError(
                f"output_config.effort must be one of {', '.join(EFFORTS)}",
                param="output_config.effort",
            )
        return EFFORTS[effort]
    thinking = payload.get("thinking")
    if thinking is None:
        return None
    if not isinstance(thinking, dict):
        raise TranslationError("thinking must be an object", param="thinking")
    kind = thinking.get("type")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if type(budget) is not int or budget < 1:
            raise TranslationError(
                "thinking.budget_tokens must be a positive integer", param="thinking"
            )
        return "low" if budget <= 1024 else "medium" if budget <= 8192 else "high"
    if kind in ("adaptive", "disabled"):
        return None
    raise TranslationError("thinking.type must be enabled, adaptive or disabled", param="thinking")


def without_own_thinking(payload: dict[str, Any]) -> dict[str, Any] | None:
    """For an Anthropic provider: `payload` without the thinking blocks llmrelay signed (a
    conversation that began on a translated route, or a client that switched models), which
    Anthropic would refuse as badly signed; None when it has none. The payload itself is not
    changed: a later attempt on a translated route still needs them."""
    messages = payload.get("messages")
    if type(messages) is not list:
        return None
    kept: list[Any] | None = None
    for position, message in enumerate(messages):
        if type(message) is not dict or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if type(content) is not list:
            continue
        blocks = [b for b in content if not _own_thinking(b)]
        if len(blocks) == len(content):
            continue
        if kept is None:
            kept = list(messages)
        kept[position] = {**message, "content": blocks}
    return None if kept is None else {**payload, "messages": kept}


def _own_thinking(block: Any) -> bool:
    if type(block) is not dict or block.get("type") != "thinking":
        return False
    signature = block.get("signature")
    return isinstance(signature, str) and signature.startswith(PREFIX)

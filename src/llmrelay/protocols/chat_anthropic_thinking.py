"""Extended thinking between Anthropic Messages and the hub's reasoning fields (a Chat-shaped
request reaching an Anthropic provider: a Chat client, or a Responses or Gemini client
through chat).

- `reasoning_effort` asks for thinking with a token budget (`thinking_for`): Anthropic's
  `{"type": "enabled", "budget_tokens"}`, which every thinking model takes. The budget must
  stay under `max_tokens` (raised by it when the client set none) and at least 1,024 tokens;
  thinking cannot be combined with a forced tool choice or a temperature other than 1, and
  when a tool loop is under way the last assistant turn must begin with its thinking block.
  Where those cannot all hold, the request goes without thinking and `reasoning_effort` is
  named as dropped: the answer comes, only without the extra reasoning.
- An answer's thinking blocks become `reasoning_content` (their text) and `reasoning_details`
  of format "anthropic-claude-v1": a thinking block is a `reasoning.text` with its
  `signature`, a redacted one a `reasoning.encrypted` with its `data` (`detail_of_block`,
  and `stream_details` for the stream's deltas, numbered by block so they join up).
- Details of that format sent back on an assistant message become its thinking blocks again,
  first in the turn as the API requires (`thinking_blocks`); details of another format
  (another provider's reasoning) cannot be read by Anthropic and are dropped.
"""

from __future__ import annotations

from typing import Any, Final

from llmrelay.protocols.errors import TranslationError

FORMAT: Final = "anthropic-claude-v1"
#: The least budget Anthropic accepts.
MIN_BUDGET: Final = 1024
#: reasoning_effort -> budget_tokens (the steps Anthropic's own docs use as examples).
BUDGETS: Final = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32000,
    "max": 32000,
    "ultra": 32000,
}
_THINKING_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})

Block = dict[str, Any]


def note(dropped: list[str], field: str) -> None:
    if field not in dropped:
        dropped.append(field)


def thinking_for(
    effort: Any, body: dict[str, Any], *, max_tokens_given: bool, dropped: list[str]
) -> None:
    """Sets `thinking` (and what it requires) on an Anthropic request `body` for a Chat
    `reasoning_effort`, or notes the effort as dropped when the request cannot think."""
    if effort is None or effort == "none":
        return  # no thinking is Anthropic's default
    if not isinstance(effort, str) or effort not in BUDGETS:
        raise TranslationError(f"unknown reasoning_effort {effort!r}", param="reasoning_effort")
    budget = BUDGETS[effort]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        note(dropped, "reasoning_effort")  # Anthropic cannot think with a forced tool
        return
    if not _last_tool_turn_thinks(body.get("messages")):
        note(dropped, "reasoning_effort")  # the loop began without thinking: it goes on so
        return
    if max_tokens_given:
        budget = min(budget, int(body["max_tokens"]) - 1)
        if budget < MIN_BUDGET:
            note(dropped, "reasoning_effort")
            return
    else:
        body["max_tokens"] = int(body["max_tokens"]) + budget
    body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if body.get("temperature") not in (None, 1):
        del body["temperature"]
        note(dropped, "temperature")
    top_p = body.get("top_p")
    if top_p is not None and not (isinstance(top_p, int | float) and top_p >= 0.95):
        del body["top_p"]
        note(dropped, "top_p")


def _last_tool_turn_thinks(messages: Any) -> bool:
    """False when the last assistant turn called a tool without a thinking block first:
    with thinking on, Anthropic refuses such a tool loop."""
    if not isinstance(messages, list):
        return True
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, list) or not content:
            return True
        calls = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
        first = content[0].get("type") if isinstance(content[0], dict) else None
        return not calls or first in _THINKING_BLOCKS
    return True


def thinking_blocks(details: Any, dropped: list[str]) -> list[Block]:
    """An assistant message's reasoning_details as Anthropic thinking blocks (to lead its
    turn); details Anthropic did not write are left out and `reasoning_details` noted."""
    blocks: list[Block] = []
    if not isinstance(details, list):
        return blocks
    for detail in details:
        if not isinstance(detail, dict) or detail.get("format") != FORMAT:
            note(dropped, "reasoning_details")
            continue
        kind = detail.get("type")
        if kind == "reasoning.text":
            text, signature = detail.get("text"), detail.get("signature")
            if isinstance(signature, str) and signature:
                thinking = text if isinstance(text, str) else ""
                blocks.append({"type": "thinking", "thinking": thinking, "signature": signature})
            else:
                note(dropped, "reasoning_details")  # unsigned thinking is refused by the API
        elif kind == "reasoning.encrypted" and isinstance(detail.get("data"), str):
            blocks.append({"type": "redacted_thinking", "data": detail["data"]})
    return blocks


def detail_of_block(block: dict[str, Any]) -> dict[str, Any] | None:
    """The hub's reasoning detail for an answer's thinking or redacted_thinking block."""
    kind = block.get("type")
    if kind == "thinking":
        detail: dict[str, Any] = {"type": "reasoning.text", "text": block.get("thinking") or ""}
        if isinstance(block.get("signature"), str) and block["signature"]:
            detail["signature"] = block["signature"]
        detail["format"] = FORMAT
        return detail
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):
        return {"type": "reasoning.encrypted", "data": block["data"], "format": FORMAT}
    return None


def stream_details(index: Any, piece: dict[str, Any]) -> dict[str, Any] | None:
    """A chunk delta for a streamed thinking piece: a thinking block's start
    (`content_block_start`'s block), a `thinking_delta` or a `signature_delta`; None for
    anything else. Each detail piece carries its block's `index`, so a reader joins them
    (gemini_reasoning.merge_details)."""
    kind = piece.get("type")
    if kind == "thinking_delta" or kind == "thinking":
        text = piece.get("thinking")
        if not isinstance(text, str) or not text:
            return None
        detail = {"type": "reasoning.text", "text": text, "format": FORMAT, "index": index}
        return {"reasoning_content": text, "reasoning_details": [detail]}
    if kind == "signature_delta":
        signature = piece.get("signature")
        if not isinstance(signature, str) or not signature:
            return None
        detail = {"type": "reasoning.text", "signature": signature, "format": FORMAT}
        detail["index"] = index
        return {"reasoning_details": [detail]}
    if kind == "redacted_thinking" and isinstance(piece.get("data"), str):
        detail = {"type": "reasoning.encrypted", "data": piece["data"], "format": FORMAT}
        detail["index"] = index
        return {"reasoning_details": [detail]}
    return None

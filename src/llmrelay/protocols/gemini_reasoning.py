"""Reasoning between Gemini parts and the hub's `reasoning_content` / `reasoning_details`.

Gemini carries a model's thinking as parts: thought summaries (`{"text", "thought": true}`)
and opaque `thoughtSignature`s on parts (on the first function call of a step, or on a text
part), which must come back on the next turn. The hub (protocols/translation.py) carries
reasoning as `reasoning_content` (plain text) and `reasoning_details`: a list of
`{"type": "reasoning.text", "text", "signature", "format"}`, `{"type": "reasoning.encrypted",
"data", "format", "id"?}` and `{"type": "reasoning.summary", "summary", "format"}`, where
`format` names who can read it back; Gemini's is "google-gemini-v1".

Two directions, two rules:

- A Gemini provider's parts read as details of format "google-gemini-v1" (`details_of_parts`):
  a thought part is a reasoning.text (its signature with it), a signature on another part a
  reasoning.encrypted. A Chat client echoes them; `gemini_parts_of_details` writes them back.
  (A function call's own signature keeps its home in the tool call's
  `extra_content.google.thought_signature`: protocols/gemini.py.)
- Reasoning from another provider (an Anthropic thinking block and its signature, a Responses
  reasoning item's encrypted content) reaches a Gemini client packed into one opaque
  `thoughtSignature` (`pack`), on the part Gemini clients keep (the first function call, else
  the first text part): Gemini CLI drops thought parts from its history but keeps signatures.
  When the client sends that part back, `unpack` gives the details as they were, so a
  multi-turn tool loop through a Gemini client keeps the other provider's reasoning.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import orjson

FORMAT: Final = "google-gemini-v1"
#: What starts a thoughtSignature packed by llmrelay (Gemini's own are plain base64, which
#: has no "." in it).
PACKED_PREFIX: Final = "llmrelay.reasoning.v1."


def pack(details: list[dict[str, Any]]) -> str:
    """Reasoning details of any format as one thoughtSignature for a Gemini client."""
    return PACKED_PREFIX + base64.urlsafe_b64encode(orjson.dumps(details)).decode()


def unpack(signature: Any) -> list[dict[str, Any]] | None:
    """The details a packed thoughtSignature holds; None for Gemini's own signatures (or a
    packed one that does not read back)."""
    if not isinstance(signature, str) or not signature.startswith(PACKED_PREFIX):
        return None
    try:
        details = orjson.loads(base64.urlsafe_b64decode(signature[len(PACKED_PREFIX) :]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(details, list):
        return None
    return [d for d in details if isinstance(d, dict)]


def details_of_parts(parts: list[Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """(reasoning_content, reasoning_details) of a Gemini model turn's parts: thought texts
    and the signatures of parts that are not function calls (theirs stay on the tool calls).
    Packed signatures give back the details they hold."""
    texts: list[str] = []
    details: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        signature = part.get("thoughtSignature")
        unpacked = unpack(signature)
        if unpacked is not None:
            details.extend(unpacked)
            texts.extend(_texts(unpacked))
            signature = None
        if part.get("thought") is True:
            text = part.get("text")
            if isinstance(text, str) and unpacked is None:
                texts.append(text)
                detail: dict[str, Any] = {"type": "reasoning.text", "text": text}
                if isinstance(signature, str) and signature:
                    detail["signature"] = signature
                detail["format"] = FORMAT
                details.append(detail)
            continue
        if isinstance(signature, str) and signature and "functionCall" not in part:
            details.append({"type": "reasoning.encrypted", "data": signature, "format": FORMAT})
    return ("".join(texts) or None), details


def _texts(details: list[dict[str, Any]]) -> list[str]:
    out = []
    for detail in details:
        text = detail.get("text") if detail.get("type") == "reasoning.text" else None
        if text is None and detail.get("type") == "reasoning.summary":
            text = detail.get("summary")
        if isinstance(text, str) and text:
            out.append(text)
    return out


def gemini_parts_of_details(
    details: Any, dropped: list[str]
) -> tuple[list[dict[str, Any]], str | None]:
    """For a Gemini provider, the reasoning of a Chat assistant message: the thought parts to
    put first (reasoning.text of Gemini's format, with their signatures) and the signature of
    a reasoning.encrypted of Gemini's format (for the turn's first text part). Details in
    another format are left out ("reasoning_details" noted in `dropped`): Gemini cannot read
    them."""
    parts: list[dict[str, Any]] = []
    signature: str | None = None
    if not isinstance(details, list):
        return parts, signature
    for detail in details:
        if not isinstance(detail, dict) or detail.get("format") != FORMAT:
            if "reasoning_details" not in dropped:
                dropped.append("reasoning_details")
            continue
        kind = detail.get("type")
        if kind == "reasoning.text" and isinstance(detail.get("text"), str):
            part: dict[str, Any] = {"text": detail["text"], "thought": True}
            if isinstance(detail.get("signature"), str) and detail["signature"]:
                part["thoughtSignature"] = detail["signature"]
            parts.append(part)
        elif kind == "reasoning.encrypted" and isinstance(detail.get("data"), str):
            signature = signature or detail["data"]
    return parts, signature


def merge_details(into: list[dict[str, Any]], pieces: Any) -> None:
    """Stream deltas' reasoning_details gathered into whole details: a piece continues the
    last detail when it has the same `index` (OpenRouter numbers them), or, without one, the
    same type and format while that detail is still open (no signature or data yet); text
    and summary are joined, everything else taken as it comes."""
    if not isinstance(pieces, list):
        return
    for piece in pieces:
        if not isinstance(piece, dict):
            continue
        last = into[-1] if into else None
        if last is not None and _continues(last, piece):
            for key, value in piece.items():
                if key in ("text", "summary") and isinstance(value, str):
                    last[key] = str(last.get(key) or "") + value
                elif value is not None:
                    last[key] = value
        else:
            into.append(dict(piece))


def _continues(last: dict[str, Any], piece: dict[str, Any]) -> bool:
    if "index" in piece or "index" in last:
        return bool(piece.get("index") == last.get("index"))
    if piece.get("type") != last.get("type") or piece.get("format") != last.get("format"):
        return False
    return not (last.get("signature") or last.get("data"))

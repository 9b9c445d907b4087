"""A chat completion as Gemini's GenerateContentResponse (a Gemini client, a provider reached
through chat); the stream's events are gemini_chat_stream.py.

Each choice is a candidate: its text a text part, each tool call a `functionCall` part (its
arguments parsed; the chat call id as Gemini's `id`, which clients send back on the
functionResponse), finish reasons as Gemini's (`tool_calls` is `STOP`: Gemini says STOP after
function calls too). Reasoning: its visible text as thought parts when the client asked
(`thinkingConfig.includeThoughts`), and the whole of `reasoning_details` packed into the
`thoughtSignature` of the first function call (else of the first text part), so it comes
back with the client's next turn (gemini_reasoning.py). Usage is usageMetadata, thinking
tokens apart as Gemini counts them.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols import gemini_reasoning

_FINISH: Final = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}


def finish_reason(reason: Any) -> str:
    return _FINISH.get(str(reason), "STOP") if reason else "STOP"


def usage_metadata(usage: Any) -> dict[str, Any] | None:
    """usageMetadata for chat usage: thinking (reasoning_tokens) apart from the answer's
    tokens, cached prompt tokens as cachedContentTokenCount (included in the prompt count,
    as Gemini counts them)."""
    if not isinstance(usage, dict):
        return None
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    details = usage.get("completion_tokens_details")
    thoughts = _int(details.get("reasoning_tokens")) if isinstance(details, dict) else 0
    thoughts = min(thoughts, completion)
    metadata: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion - thoughts,
        "totalTokenCount": _int(usage.get("total_tokens")) or prompt + completion,
    }
    prompt_details = usage.get("prompt_tokens_details")
    cached = _int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    if cached:
        metadata["cachedContentTokenCount"] = cached
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    return metadata


def _int(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


def chat_response_to_gemini(
    completion: dict[str, Any], *, model: str, include_thoughts: bool
) -> dict[str, Any]:
    candidates = []
    for position, choice in enumerate(completion.get("choices") or []):
        message = choice.get("message") or {}
        parts = answer_parts(
            text=message_text(message.get("content")),
            calls=message.get("tool_calls") or [],
            reasoning=message.get("reasoning_content"),
            details=message.get("reasoning_details"),
            include_thoughts=include_thoughts,
        )
        if not parts:
            parts = [{"text": ""}]
        candidates.append(
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": finish_reason(choice.get("finish_reason")),
                "index": choice.get("index", position),
            }
        )
    answer: dict[str, Any] = {"candidates": candidates}
    metadata = usage_metadata(completion.get("usage"))
    if metadata is not None:
        answer["usageMetadata"] = metadata
    answer["modelVersion"] = model
    answer["responseId"] = response_id(completion.get("id"))
    return answer


def response_id(chat_id: Any) -> str:
    text = str(chat_id or "")
    return text.removeprefix("chatcmpl-") or "llmrelay"


def message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict)
        )
    return ""


def function_call_part(call: dict[str, Any]) -> dict[str, Any] | None:
    """A chat tool call as a functionCall part (arguments that are not a JSON object become
    `{}`: Gemini's args is an object). A Gemini signature the call carries goes with it."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return None
    raw = function.get("arguments")
    try:
        args = orjson.loads(raw) if isinstance(raw, str) and raw else raw
    except orjson.JSONDecodeError:
        args = None
    made: dict[str, Any] = {"name": str(function.get("name") or "")}
    made["args"] = args if isinstance(args, dict) else {}
    if isinstance(call.get("id"), str) and call["id"]:
        made["id"] = call["id"]
    part: dict[str, Any] = {"functionCall": made}
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    if isinstance(signature, str) and signature:
        part["thoughtSignature"] = signature
    return part


def answer_parts(
    *,
    text: str,
    calls: list[Any],
    reasoning: Any,
    details: Any,
    include_thoughts: bool,
) -> list[dict[str, Any]]:
    """One candidate's parts: thoughts first (when asked for), the text, the calls; the
    packed reasoning on the first call without a signature of its own, else on the text."""
    parts: list[dict[str, Any]] = []
    thought = thought_text(reasoning, details)
    if include_thoughts and thought:
        parts.append({"text": thought, "thought": True})
    if text:
        parts.append({"text": text})
    for call in calls:
        part = function_call_part(call)
        if part is not None:
            parts.append(part)
    if isinstance(details, list) and details:
        calls_unsigned = (p for p in parts if "functionCall" in p and "thoughtSignature" not in p)
        anchor = next(calls_unsigned, None)
        if anchor is None:
            anchor = next((p for p in parts if "text" in p and not p.get("thought")), None)
        if anchor is None:
            anchor = {"text": ""}
            parts.append(anchor)
        anchor["thoughtSignature"] = gemini_reasoning.pack(details)
    return parts


def thought_text(reasoning: Any, details: Any) -> str:
    if isinstance(reasoning, str) and reasoning:
        return reasoning
    if not isinstance(details, list):
        return ""
    texts = []
    for detail in details:
        if not isinstance(detail, dict):
            continue
        value = detail.get("text") if detail.get("type") == "reasoning.text" else None
        if detail.get("type") == "reasoning.summary":
            value = detail.get("summary")
        if isinstance(value, str):
            texts.append(value)
    return "".join(texts)

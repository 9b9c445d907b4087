"""OpenAI Responses -> Chat Completions: request bodies and whole (non-streamed) answers.

For a Responses client reaching a provider that only speaks Chat Completions
(`responses_request_to_chat`, then `chat_response_to_responses`). The Responses API is
stateful where Chat is not: anything that needs the server to remember (previous_response_id,
conversations, stored prompts, background runs) raises TranslationError naming the client's
field. Fields whose loss changes nothing the client relies on (`store`, `text.verbosity`,
`client_metadata`, OpenAI's built-in tools...) are returned by name in `dropped`, which the
gateway names in the `x-llmrelay-dropped` header. Input items are translated in
`responses_chat_input`, tools and tool calls in `responses_tools`, reasoning in
`responses_reasoning`; the stream in `responses_chat_stream`, which builds its response
objects with the helpers here so both answers have one shape.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from llmrelay.protocols import responses_reasoning
from llmrelay.protocols.responses_chat_input import fail, note, responses_input_to_chat
from llmrelay.protocols.responses_tool_calls import responses_item_of_call
from llmrelay.protocols.responses_tools import (
    responses_tool_choice_to_chat,
    responses_tools_to_chat,
    tool_names,
)

__all__ = [
    "chat_response_to_responses",
    "function_call_item",
    "message_item",
    "response_object",
    "response_status",
    "responses_request_to_chat",
    "responses_usage_from_chat",
]

# Responses fields read by responses_request_to_chat itself.
_MAPPED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "stream",
        "user",
        "include",
        "prompt_cache_key",
    }
)
# Fields that need state the Chat provider does not keep, or a feature it does not have.
_REFUSED = {
    "previous_response_id": (
        "previous_response_id needs the stored conversation, which this model's provider does "
        "not keep; send the whole conversation in input"
    ),
    "conversation": (
        "conversations are stored by the server, which this model's provider does not do; "
        "send the whole conversation in input"
    ),
    "prompt": "stored prompts are not available for this model; send instructions and input",
    "context_management": "server-side context compaction is not available for this model",
    "moderation": "moderated responses are not available for this model",
}
# Fields whose default value is the only one a Chat provider can honour.
_ONLY_DEFAULT: dict[str, tuple[Any, str]] = {
    "background": (False, "background responses need a stored response; not available here"),
    "truncation": ("disabled", "automatic truncation is not available for this model"),
    "top_logprobs": (0, "logprobs are not available from this model"),
}
# `include` entries honoured: a reasoning item always carries what the provider needs back
# (responses_reasoning.py), so the encrypted reasoning is included whether asked or not.
_INCLUDE_MOOT = frozenset({"reasoning.encrypted_content"})


def responses_request_to_chat(
    payload: dict[str, Any], *, upstream_model: str
) -> tuple[dict[str, Any], list[str]]:
    """`(chat request, dropped field names)`. Every field is either carried, named in
    dropped, or refused: a Responses client must never believe a setting took effect when
    the Chat provider never saw it."""
    dropped: list[str] = []
    for field, value in payload.items():
        if value is None or field in _MAPPED:
            continue
        if field in _REFUSED:
            raise fail(_REFUSED[field], field)
        if field in _ONLY_DEFAULT:
            default, message = _ONLY_DEFAULT[field]
            if value != default:
                raise fail(message, field)
        if field == "store" and value is False:
            continue  # honoured: nothing is kept
        # store: true, metadata, service_tier, safety_identifier,
        # max_tool_calls (built-in tools only), stream_options, client_metadata and unknown
        # extensions: reported, not sent.
        note(dropped, field)
    _check_include(payload.get("include"), dropped)
    messages = responses_input_to_chat(payload.get("input"), payload.get("instructions"), dropped)
    body: dict[str, Any] = {"model": upstream_model, "messages": messages}
    max_tokens = payload.get("max_output_tokens")
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise fail("max_output_tokens must be a positive integer", "max_output_tokens")
        body["max_tokens"] = max_tokens
    for field in ("temperature", "top_p"):
        if payload.get(field) is not None:
            body[field] = payload[field]
    if payload.get("stream") is not None:
        body["stream"] = bool(payload["stream"])
        if body["stream"]:
            # The Responses client is owed usage in response.completed.
            body["stream_options"] = {"include_usage": True}
    if payload.get("user") is not None:
        body["user"] = payload["user"]
    if payload.get("prompt_cache_key") is not None:
        # Chat Completions has it too (OpenAI routes cache by it); the chat translations to
        # Anthropic and Gemini leave it out and name it.
        body["prompt_cache_key"] = payload["prompt_cache_key"]
    _tools(payload, body, dropped)
    _text(payload.get("text"), body, dropped)
    _reasoning(payload.get("reasoning"), body, dropped)
    return body, dropped


def _check_include(include: Any, dropped: list[str]) -> None:
    if include is None:
        return
    if not isinstance(include, list):
        raise fail("include must be a list", "include")
    for entry in include:
        if not isinstance(entry, str) or entry not in _INCLUDE_MOOT:
            raise fail(f"include {entry!r} is not available for this model", "include")


def _tools(payload: dict[str, Any], body: dict[str, Any], dropped: list[str]) -> None:
    tools = payload.get("tools")
    if tools is not None:
        body["tools"] = responses_tools_to_chat(tools, dropped)
    if not body.get("tools"):
        body.pop("tools", None)
        # OpenAI's Chat API refuses both switches without tools; they are moot anyway.
        for field in ("tool_choice", "parallel_tool_calls"):
            if payload.get(field) is not None:
                note(dropped, field)
        return
    if payload.get("tool_choice") is not None:
        names = tool_names(tools)
        body["tool_choice"] = responses_tool_choice_to_chat(payload["tool_choice"], names)
    if payload.get("parallel_tool_calls") is not None:
        body["parallel_tool_calls"] = bool(payload["parallel_tool_calls"])


def _text(text: Any, body: dict[str, Any], dropped: list[str]) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        raise fail("text must be an object", "text")
    if text.get("verbosity") is not None:
        note(dropped, "text.verbosity")
    fmt = text.get("format")
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if not isinstance(fmt, dict) or kind not in ("text", "json_object", "json_schema"):
        raise fail("text.format must be text, json_object or json_schema", "text")
    if kind != "json_schema":
        if kind == "json_object":
            body["response_format"] = {"type": "json_object"}
        return
    name, schema = fmt.get("name"), fmt.get("schema")
    if not isinstance(name, str) or not isinstance(schema, dict):
        raise fail("a json_schema text.format needs a name and a schema", "text")
    json_schema: dict[str, Any] = {"name": name, "schema": schema}
    for key in ("description", "strict"):
        if fmt.get(key) is not None:
            json_schema[key] = fmt[key]
    body["response_format"] = {"type": "json_schema", "json_schema": json_schema}


def _reasoning(reasoning: Any, body: dict[str, Any], dropped: list[str]) -> None:
    if reasoning is None:
        return
    if not isinstance(reasoning, dict):
        raise fail("reasoning must be an object", "reasoning")
    for key, value in reasoning.items():
        if value is None:
            continue
        if key == "effort":
            body["reasoning_effort"] = value
        elif key not in ("summary", "generate_summary"):
            # context, mode... (the summary is the reasoning text the provider gives, when
            # it gives any: responses_reasoning.py)
            note(dropped, f"reasoning.{key}")


def response_status(finish_reason: Any) -> tuple[str, dict[str, str] | None]:
    """`(status, incomplete_details)` for a Chat finish_reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def output_text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def refusal_part(refusal: str) -> dict[str, Any]:
    return {"type": "refusal", "refusal": refusal}


def message_item(item_id: str, content: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def base_id(chat_id: Any) -> str:
    """Response and item ids are derived from the Chat id, so logs of both sides line up."""
    if isinstance(chat_id, str) and chat_id:
        return chat_id.removeprefix("chatcmpl-")
    return uuid.uuid4().hex


def response_object(
    *,
    response_id: str,
    created_at: int,
    model: str,
    request: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete_details: dict[str, str] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Response as the API writes it: the answer, and the request's settings echoed with
    the API's defaults for those the client left out."""
    reasoning = request.get("reasoning")
    if not isinstance(reasoning, dict):
        reasoning = {}
    text = dict(request["text"]) if isinstance(request.get("text"), dict) else {}
    text["format"] = text.get("format") or {"type": "text"}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": request.get("max_tool_calls"),
        "model": model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None,
        "prompt_cache_key": request.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": request.get("safety_identifier"),
        "service_tier": None,
        "store": False,  # not echoed as asked: nothing is kept, whatever the client wanted
        "temperature": request.get("temperature"),
        "text": text,
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": request.get("tools") or [],
        "top_logprobs": request.get("top_logprobs") or 0,
        "top_p": request.get("top_p"),
        "truncation": request.get("truncation") or "disabled",
        "usage": usage,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def chat_response_to_responses(
    body: dict[str, Any], *, model: str, request: dict[str, Any]
) -> dict[str, Any]:
    """A chat.completion as the Response the client asked for: its reasoning as one
    reasoning item (responses_reasoning.py), the message's text (and refusal) as one message
    item, then one item per tool call (a function_call, or the custom, namespaced, local shell
    or apply patch call the function stands for: responses_tools.py), the Chat call id kept as
    `call_id` so the client's output finds its way back."""
    choices = body.get("choices") or []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    status, incomplete = response_status(choice.get("finish_reason"))
    base = base_id(body.get("id"))
    content: list[dict[str, Any]] = []
    text = _chat_text(message.get("content"))
    if text:
        content.append(output_text_part(text))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append(refusal_part(refusal))
    output: list[dict[str, Any]] = []
    packed = responses_reasoning.Packed(_details(message.get("reasoning_details")))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict) and isinstance(call.get("extra_content"), dict):
            packed.calls[str(call.get("id"))] = call["extra_content"]
    reasoning_text = message.get("reasoning_content")
    if not isinstance(reasoning_text, str):
        reasoning_text = responses_reasoning.text_of_details(packed.details)
    if packed or reasoning_text:
        wanted = responses_reasoning.wants_summary(request)
        item = responses_reasoning.reasoning_item(
            f"rs_{base}", reasoning_text, packed, summary=wanted
        )
        output.append(item)
    if content:
        output.append(message_item(f"msg_{base}", content, "completed"))
    names = tool_names(request.get("tools"))
    for index, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            # Some providers send the arguments as an object; the Responses API never does.
            arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
        output.append(
            responses_item_of_call(
                f"fc_{base}_{index}",
                str(call.get("id") or "call_" + uuid.uuid4().hex),
                str(function.get("name") or ""),
                arguments,
                "completed",
                names,
            )
        )
    if output and status != "completed":
        # Cut short by the token limit or a filter: the last item is where it stopped.
        output[-1]["status"] = "incomplete"
    created = body.get("created")
    return response_object(
        response_id=f"resp_{base}",
        created_at=created if isinstance(created, int) else int(time.time()),
        model=model,
        request=request,
        status=status,
        output=output,
        usage=responses_usage_from_chat(body.get("usage")),
        incomplete_details=incomplete,
    )


def _details(details: Any) -> list[dict[str, Any]]:
    if not isinstance(details, list):
        return []
    return [detail for detail in details if isinstance(detail, dict)]


def _chat_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _count(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def responses_usage_from_chat(usage: Any) -> dict[str, Any] | None:
    """Both count cached input inside the input total. Unknown usage stays null rather than
    zero, so nothing downstream bills an answer as free. Cache writes are only known when
    the Chat usage came from Anthropic (see chat_anthropic.chat_usage_from_anthropic)."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage, "prompt_tokens")
    completion = _count(usage, "completion_tokens")
    total = _count(usage, "total_tokens") or prompt + completion
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": _count(usage.get("prompt_tokens_details"), "cached_tokens"),
            "cache_write_tokens": _count(usage, "cache_creation_input_tokens"),
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _count(usage.get("completion_tokens_details"), "reasoning_tokens")
        },
        "total_tokens": total,
    }

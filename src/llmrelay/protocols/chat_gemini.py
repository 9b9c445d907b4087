"""Chat Completions <-> Gemini generateContent, request and whole (non-streamed) answer.

Reasoning: a Gemini answer's thought parts and the signatures on its other parts become
`reasoning_content` / `reasoning_details` of format "google-gemini-v1" (a function call's
signature stays on its tool call); a Chat client that sends them back gets them to Gemini as
they came, and details of other formats are left out (gemini_reasoning.py).

The model and the choice between generateContent and streamGenerateContent?alt=sse live in
the URL, so the request body carries neither. Whatever Gemini cannot honour raises
TranslationError naming the client's field; fields whose loss changes nothing the client
can observe are dropped and named in the returned list.
"""

from __future__ import annotations

import re
import time
from typing import Any

import orjson

from llmrelay.protocols import gemini, gemini_reasoning
from llmrelay.protocols.translation import TranslationError

#: reasoning_effort as a thinking budget, the mapping Google's OpenAI-compatible endpoint
#: documents (none 0, low 1K, medium 8K, high 24K tokens; minimal and xhigh, which it lacks,
#: take the nearest level). 2.5 models take only a budget and Gemini 3 still accepts one,
#: while 2.5 rejects Gemini 3's thinkingLevel: the model is unknown here, so a budget it is.
THINKING_BUDGETS = {"none": 0, "minimal": 1024, "low": 1024, "medium": 8192, "high": 24576}
THINKING_BUDGETS["xhigh"] = THINKING_BUDGETS["high"]

_DATA_URL = re.compile(r"data:([^;,]+)(?:;[^;,]*)*;base64,(.*)", re.DOTALL)
_IMAGE_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "heic": "image/heic",
    "heif": "image/heif",
}
_FILE_TYPES = {**_IMAGE_TYPES, "pdf": "application/pdf", "txt": "text/plain"}
_TOOL_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


def chat_request_to_gemini(payload: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A generateContent body for a Chat request, and the Chat fields it left out."""
    dropped: list[str] = []
    config: dict[str, Any] = {}
    for key, value in payload.items():
        if value is None or key in ("model", "messages", "tools", "functions"):
            continue
        if key in ("tool_choice", "function_call", "reasoning_effort", "response_format"):
            continue
        if key == "temperature":
            config["temperature"] = value
        elif key == "top_p":
            config["topP"] = value
        elif key == "top_k":
            config["topK"] = value
        elif key in ("max_completion_tokens", "max_tokens"):
            config["maxOutputTokens"] = payload.get("max_completion_tokens") or value
        elif key == "stop":
            stops = [value] if isinstance(value, str) else value
            if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
                raise TranslationError("stop must be a string or a list of strings", param=key)
            if stops:
                config["stopSequences"] = stops
        elif key == "n":
            if value != 1:
                config["candidateCount"] = value
        elif key == "seed":
            config["seed"] = value
        elif key in ("presence_penalty", "frequency_penalty"):
            # 0 is OpenAI's default and many clients send it; models without penalties
            # reject the field, so only a real penalty is passed on.
            if value:
                config["presencePenalty" if key[0] == "p" else "frequencyPenalty"] = value
        elif key == "logprobs":
            if value:
                raise TranslationError("logprobs are not available from Gemini", param=key)
            dropped.append(key)
        elif key in ("audio", "web_search_options"):
            raise TranslationError(f"{key} is not supported with Gemini", param=key)
        elif key == "modalities":
            if not isinstance(value, list) or any(m != "text" for m in value):
                raise TranslationError("Gemini answers with text only here", param=key)
            dropped.append(key)
        else:
            # user, logit_bias, parallel_tool_calls, stream, stream_options, store, metadata,
            # service_tier, prediction, prompt_cache_key... and unknown extensions alike:
            # Gemini has no place for them; reported, not sent.
            dropped.append(key)
    config.update(_response_format(payload.get("response_format")))
    effort = payload.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str) or effort not in THINKING_BUDGETS:
            raise TranslationError(f"unknown reasoning_effort {effort!r}", param="reasoning_effort")
        config["thinkingConfig"] = {"thinkingBudget": THINKING_BUDGETS[effort]}

    system, contents = _contents(payload.get("messages"), dropped)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": system}
    body.update(_tools(payload))
    if config:
        body["generationConfig"] = config
    return body, dropped


def _response_format(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    if kind == "json_schema":
        # responseJsonSchema takes JSON Schema as it is ($ref, additionalProperties...),
        # where responseSchema would need the lossy OpenAPI rewrite.
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        out: dict[str, Any] = {"responseMimeType": "application/json"}
        if isinstance(schema, dict):
            out["responseJsonSchema"] = schema
        return out
    raise TranslationError(f"unknown response_format type {kind!r}", param="response_format")


# Messages -----------------------------------------------------------------------------------


def _contents(
    messages: Any, dropped: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(systemInstruction parts, contents). Gemini has one system instruction, so every
    system or developer message joins it in order, wherever it stood."""
    if not isinstance(messages, list) or not messages:
        raise TranslationError("messages must be a non-empty list", param="messages")
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    in_tool_turn = False
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        where = f"messages[{index}]"
        if role in ("tool", "function"):
            part = _function_response(message, call_names, where)
            if in_tool_turn:
                contents[-1]["parts"].append(part)
            else:
                contents.append({"role": "user", "parts": [part]})
            in_tool_turn = True
            continue
        in_tool_turn = False
        if role in ("system", "developer"):
            system.extend({"text": text} for text in _texts(message.get("content"), where))
        elif role == "user":
            parts = [_user_part(p, where) for p in _content_parts(message.get("content"))]
            parts = [p for p in parts if p.get("text") != ""]
            if parts:
                contents.append({"role": "user", "parts": parts})
        elif role == "assistant":
            parts = _assistant_parts(message, call_names, where, dropped)
            if parts:
                contents.append({"role": "model", "parts": parts})
        else:
            raise TranslationError(f"{where} has an unknown role {role!r}", param="messages")
    return system, contents


def _content_parts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def _texts(content: Any, where: str) -> list[str]:
    texts = []
    for part in _content_parts(content):
        if not isinstance(part, dict) or part.get("type") not in ("text", "refusal"):
            raise TranslationError(f"{where} may only hold text", param="messages")
        text = part.get("text", part.get("refusal"))
        if isinstance(text, str) and text:
            texts.append(text)
    return texts


def _user_part(part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text" and isinstance(part.get("text"), str):
        return {"text": part["text"]}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if isinstance(url, str) and url.startswith("data:"):
            return _inline(url, where)
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            extension = url.split("?", 1)[0].split("#", 1)[0].rsplit(".", 1)[-1].lower()
            mime = _IMAGE_TYPES.get(extension, "image/jpeg")
            return {"fileData": {"mimeType": mime, "fileUri": url}}
        raise TranslationError(
            f"{where}: image_url must be a data: or http(s) URL", param="messages"
        )
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        if not isinstance(audio.get("data"), str) or audio.get("format") not in ("wav", "mp3"):
            raise TranslationError(f"{where}: input_audio needs data and format", param="messages")
        return {"inlineData": {"mimeType": f"audio/{audio['format']}", "data": audio["data"]}}
    if kind == "file":
        file = part.get("file") or {}
        data = file.get("file_data")
        if isinstance(data, str) and data.startswith("data:"):
            return _inline(data, where)
        extension = str(file.get("filename", "")).rsplit(".", 1)[-1].lower()
        if isinstance(data, str) and extension in _FILE_TYPES:
            return {"inlineData": {"mimeType": _FILE_TYPES[extension], "data": data}}
        raise TranslationError(
            f"{where}: files must be sent inline as file_data (a data: URL)", param="messages"
        )
    raise TranslationError(f"{where}: content part {kind!r} is not supported", param="messages")


def _inline(url: str, where: str) -> dict[str, Any]:
    match = _DATA_URL.fullmatch(url)
    if match is None:
        raise TranslationError(f"{where}: data: URLs must be base64", param="messages")
    return {"inlineData": {"mimeType": match[1], "data": match[2]}}


def _assistant_parts(
    message: dict[str, Any], call_names: dict[str, str], where: str, dropped: list[str]
) -> list[dict[str, Any]]:
    """The model turn: its thoughts (reasoning of Gemini's own format, with their
    signatures: gemini_reasoning.py), its text, its function calls."""
    thoughts, signature = gemini_reasoning.gemini_parts_of_details(
        message.get("reasoning_details"), dropped
    )
    if message.get("reasoning_content") and not thoughts and "reasoning_content" not in dropped:
        dropped.append("reasoning_content")  # unsigned thinking: Gemini takes none back
    texts: list[dict[str, Any]] = [{"text": t} for t in _texts(message.get("content"), where)]
    if signature is not None and texts:
        texts[0]["thoughtSignature"] = signature
    parts = thoughts + texts
    calls = _list(message.get("tool_calls"), "messages")
    if isinstance(message.get("function_call"), dict):
        calls.append({"type": "function", "function": message["function_call"]})
    signed = False
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            raise TranslationError(
                f"{where}: only function tool calls are supported", param="messages"
            )
        name = str(function.get("name", ""))
        if isinstance(call.get("id"), str):
            call_names[call["id"]] = name
        part: dict[str, Any] = {"functionCall": {"name": name, "args": _args(function, where)}}
        signature = gemini.tool_call_signature(call)
        if signature is None and not signed:
            signature = gemini.SKIP_SIGNATURE
        if signature is not None:
            part["thoughtSignature"] = signature
            signed = True
        parts.append(part)
    return parts


def _args(function: dict[str, Any], where: str) -> dict[str, Any]:
    raw = function.get("arguments") or "{}"
    try:
        args = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        raise TranslationError(
            f"{where}: tool call arguments must be a JSON object", param="messages"
        )
    return args


def _function_response(
    message: dict[str, Any], call_names: dict[str, str], where: str
) -> dict[str, Any]:
    """Gemini pairs a result with its call by function name, which Chat leaves on the
    assistant's tool call: it is found by tool_call_id (or, failing that, the message's own
    `name`, as legacy function messages and some clients give it)."""
    name = call_names.get(str(message.get("tool_call_id")), message.get("name"))
    if not isinstance(name, str) or not name:
        raise TranslationError(
            f"{where}: tool_call_id matches no earlier assistant tool call", param="messages"
        )
    content = message.get("content")
    text = content if isinstance(content, str) else "".join(_texts(content, where))
    try:
        result: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        result = text
    return {"functionResponse": {"name": name, "response": {"result": result}}}


# Tools --------------------------------------------------------------------------------------


def _tools(payload: dict[str, Any]) -> dict[str, Any]:
    """`tools` and `toolConfig`, from tools/tool_choice or the legacy functions/function_call."""
    functions = [
        {"type": "function", "function": f} for f in _list(payload.get("functions"), "functions")
    ]
    tools = _list(payload.get("tools")) + functions
    choice = payload.get("tool_choice", payload.get("function_call"))
    param = "tool_choice" if "tool_choice" in payload else "function_call"
    if not tools:
        if choice in (None, "auto", "none"):
            return {}
        raise TranslationError(f"{param} names a tool but no tools were given", param=param)
    declarations = [_declaration(tool) for tool in tools]
    config: dict[str, Any] | None = None
    if isinstance(choice, str):
        if choice not in _TOOL_MODES:
            raise TranslationError(f"unknown {param} {choice!r}", param=param)
        config = {"mode": _TOOL_MODES[choice]}
    elif isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        # Exactly "only these tools": the others are not declared at all.
        allowed = choice.get("allowed_tools") or {}
        listed = allowed.get("tools") if isinstance(allowed, dict) else None
        if not isinstance(listed, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function") or {}, dict) for t in listed
        ):
            raise TranslationError(f"{param}: allowed_tools.tools must list tools", param=param)
        names = {(t.get("function") or {}).get("name") for t in listed}
        declarations = [d for d in declarations if d["name"] in names]
        config = {"mode": "ANY" if allowed.get("mode") == "required" else "AUTO"}
    elif isinstance(choice, dict):
        function = choice.get("function") or {}
        name = (function.get("name") if isinstance(function, dict) else None) or choice.get("name")
        if choice.get("type", "function") != "function" or not isinstance(name, str):
            raise TranslationError(f"unsupported {param}", param=param)
        config = {"mode": "ANY", "allowedFunctionNames": [name]}
    out: dict[str, Any] = {"tools": [{"functionDeclarations": declarations}]}
    if config is not None:
        out["toolConfig"] = {"functionCallingConfig": config}
    return out


def _list(value: Any, param: str = "tools") -> list[Any]:
    """A list field of the request (None or empty: none); anything else is a 400."""
    if not value:
        return []
    if not isinstance(value, list):
        raise TranslationError(f"{param}: expected a list, got {type(value).__name__}", param=param)
    return list(value)


def _declaration(tool: Any) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or tool.get("type") != "function":
        raise TranslationError("only function tools are supported with Gemini", param="tools")
    declaration: dict[str, Any] = {"name": function.get("name")}
    if function.get("description"):
        declaration["description"] = function["description"]
    parameters = gemini.function_parameters(function.get("parameters"))
    if parameters is not None:
        declaration["parameters"] = parameters
    return declaration


# Answer -------------------------------------------------------------------------------------


def gemini_response_to_chat(body: dict[str, Any], *, model: str) -> dict[str, Any]:
    """A chat.completion for a GenerateContentResponse.

    A prompt Gemini refused outright (promptFeedback.blockReason, no candidates) is an
    answer, not an error: the request was valid and billed, so the client gets one empty
    choice with finish_reason "content_filter", as OpenAI reports its own filtering.
    """
    candidates = body.get("candidates") or []
    choices = [_choice(candidate, position) for position, candidate in enumerate(candidates)]
    if not choices:
        blocked = bool((body.get("promptFeedback") or {}).get("blockReason"))
        message = {"role": "assistant", "content": ""}
        reason = "content_filter" if blocked else "stop"
        choices = [{"index": 0, "message": message, "logprobs": None, "finish_reason": reason}]
    completion: dict[str, Any] = {
        "id": gemini.new_completion_id(body.get("responseId")),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if isinstance(body.get("usageMetadata"), dict):
        completion["usage"] = gemini.chat_usage(body["usageMetadata"])
    return completion


def _choice(candidate: dict[str, Any], position: int) -> dict[str, Any]:
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    parts = (candidate.get("content") or {}).get("parts") or []
    for part in parts:
        text = gemini.visible_text(part)
        if text is not None:
            texts.append(text)
        call = gemini.chat_tool_call(part)
        if call is not None:
            tool_calls.append(call)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not tool_calls else None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    reasoning, details = gemini_reasoning.details_of_parts(parts)
    if reasoning:
        message["reasoning_content"] = reasoning
    if details:
        message["reasoning_details"] = details
    return {
        "index": candidate.get("index", position),
        "message": message,
        "logprobs": None,
        "finish_reason": gemini.finish_reason(
            candidate.get("finishReason"), tool_calls=bool(tool_calls)
        ),
    }

"""A Gemini generateContent request as Chat Completions (a Gemini client, a provider reached
through chat: OpenAI's types, Anthropic's, the mock).

The model and the choice of streaming are in the client's URL, so the caller gives them.
`contents` become messages (a model turn's function calls become the assistant's tool calls,
with Gemini's call ids when the client sent them, else ids made up here and given to the
matching functionResponse parts, which Gemini pairs by name); `systemInstruction` the system
message; `generationConfig` the sampling fields, `response_format` and `reasoning_effort`;
`tools[].functionDeclarations` function tools; `toolConfig` `tool_choice`. Gemini's own tools
(Google Search, code execution, URL context...) and `safetySettings` are left out and named in
the dropped list (the agent works on without them); `cachedContent` (a cache only Gemini
holds) and what Chat cannot carry at all (audio output, an enum-typed text answer) raise
TranslationError naming the field. The answer's direction is gemini_chat_answer.py.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.protocols import gemini_reasoning
from llmrelay.protocols.gemini_schema import json_schema_of
from llmrelay.protocols.translation import TranslationError

#: generationConfig.thinkingConfig.thinkingBudget as a reasoning_effort: the reverse of
#: chat_gemini.THINKING_BUDGETS (0 is off; -1, "dynamic", is the provider's default).
_EFFORT_CEILINGS: Final = ((1024, "low"), (8192, "medium"))
_LEVELS: Final = frozenset({"minimal", "low", "medium", "high"})
_TOOL_MODES: Final = {"AUTO": "auto", "VALIDATED": "auto", "ANY": "required", "NONE": "none"}
_AUDIO: Final = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mp3": "mp3", "audio/mpeg": "mp3"}
#: Inline files Chat takes as a `file` part (by the extension its filename gets).
_FILES: Final = {"application/pdf": "pdf", "text/plain": "txt"}
#: generationConfig fields Chat has a name for.
_SAMPLING: Final = {
    "temperature": "temperature",
    "topP": "top_p",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
#: generationConfig fields read on their own (after the loop over the others).
_READ_CONFIG: Final = frozenset(
    {"thinkingConfig", "responseMimeType", "responseSchema", "responseJsonSchema"}
)
#: Top-level fields read below (in either spelling Google's JSON accepts).
_READ: Final = frozenset(
    {
        "contents",
        "systemInstruction",
        "system_instruction",
        "generationConfig",
        "generation_config",
        "tools",
        "toolConfig",
        "tool_config",
        "model",
    }
)


def field(holder: dict[str, Any], name: str) -> Any:
    """`holder[name]`, or its snake_case spelling, which Google's JSON parsers accept too."""
    value = holder.get(name)
    if value is None:
        snake = "".join("_" + c.lower() if c.isupper() else c for c in name)
        value = holder.get(snake)
    return value


def gemini_request_to_chat(
    payload: dict[str, Any], *, upstream_model: str, stream: bool
) -> tuple[dict[str, Any], list[str]]:
    """The chat body for a generateContent body, and the Gemini fields it left out."""
    dropped: list[str] = []
    for key, value in payload.items():
        if value is None or key in _READ:
            continue
        if key in ("cachedContent", "cached_content"):
            raise TranslationError(
                "cachedContent names a cache held by Gemini: this model's provider cannot "
                "read it (send the contents themselves)",
                param="cachedContent",
            )
        dropped.append(key)  # safetySettings, labels, serviceTier and unknown extensions
    messages: list[dict[str, Any]] = []
    system = field(payload, "systemInstruction")
    if system is not None:
        text = _system_text(system)
        if text:
            messages.append({"role": "system", "content": text})
    messages.extend(_messages(payload.get("contents"), dropped))
    body: dict[str, Any] = {"model": upstream_model, "messages": messages}
    config = field(payload, "generationConfig")
    if config is not None:
        if not isinstance(config, dict):
            raise TranslationError("generationConfig must be an object", param="generationConfig")
        body.update(_generation_config(config, dropped))
    tools = _tools(payload.get("tools"), dropped)
    if tools:
        body["tools"] = tools
        choice = _tool_choice(field(payload, "toolConfig"), dropped)
        if choice is not None:
            body["tool_choice"] = choice
    elif field(payload, "toolConfig") is not None:
        dropped.append("toolConfig")
    if stream:
        body["stream"] = True
        # The Gemini client is owed usageMetadata on its last event.
        body["stream_options"] = {"include_usage": True}
    return body, dropped


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    parts = system.get("parts") if isinstance(system, dict) else None
    if not isinstance(parts, list):
        raise TranslationError(
            "systemInstruction must be a Content with parts", param="systemInstruction"
        )
    texts = []
    for part in parts:
        text = part.get("text") if isinstance(part, dict) else None
        if not isinstance(text, str):
            raise TranslationError(
                "systemInstruction may only hold text", param="systemInstruction"
            )
        texts.append(text)
    return "\n".join(t for t in texts if t)


# Contents -----------------------------------------------------------------------------------


def _messages(contents: Any, dropped: list[str]) -> list[dict[str, Any]]:
    if not isinstance(contents, list) or not contents:
        raise TranslationError("contents must be a non-empty list", param="contents")
    messages: list[dict[str, Any]] = []
    #: Calls of the model turns so far that no functionResponse answered yet: (id, name),
    #: and those answered.
    open_calls: list[tuple[str, str]] = []
    answered: list[tuple[str, str]] = []
    for index, content in enumerate(contents):
        where = f"contents[{index}]"
        if not isinstance(content, dict):
            raise TranslationError(f"{where} must be an object", param="contents")
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise TranslationError(f"{where}.parts must be a list", param="contents")
        role = content.get("role") or "user"
        if role == "model":
            message = _assistant(parts, index, open_calls, where, dropped)
            if message is not None:
                messages.append(message)
        elif role in ("user", "function"):
            messages.extend(_user(parts, open_calls, answered, where, dropped))
        else:
            raise TranslationError(f"{where} has an unknown role {role!r}", param="contents")
    return messages


def _assistant(
    parts: list[Any],
    index: int,
    open_calls: list[tuple[str, str]],
    where: str,
    dropped: list[str],
) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            raise TranslationError(f"{where}: each part must be an object", param="contents")
        call = field(part, "functionCall")
        if isinstance(call, dict):
            calls.append(_tool_call(call, part, f"call_{index}_{len(calls)}", where))
            open_calls.append((calls[-1]["id"], calls[-1]["function"]["name"]))
        elif isinstance(part.get("text"), str):
            if part.get("thought") is not True and part["text"]:
                texts.append(part["text"])
        elif _kind(part):
            # Code execution, generated images...: nothing a chat model could be shown.
            _note(dropped, f"contents.parts.{_kind(part)}")
    reasoning, details = gemini_reasoning.details_of_parts(parts)
    if not texts and not calls and not reasoning and not details:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = reasoning
    if details:
        message["reasoning_details"] = details
    return message


def _tool_call(call: dict[str, Any], part: dict[str, Any], made_id: str, where: str) -> Any:
    name = call.get("name")
    if not isinstance(name, str) or not name:
        raise TranslationError(f"{where}: functionCall needs a name", param="contents")
    args = call.get("args")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise TranslationError(f"{where}: functionCall.args must be an object", param="contents")
    given = call.get("id")
    tool_call: dict[str, Any] = {
        "id": given if isinstance(given, str) and given else made_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args).decode()},
    }
    signature = part.get("thoughtSignature")
    if isinstance(signature, str) and signature and gemini_reasoning.unpack(signature) is None:
        tool_call["extra_content"] = {"google": {"thought_signature": signature}}
    return tool_call


def _user(
    parts: list[Any],
    open_calls: list[tuple[str, str]],
    answered: list[tuple[str, str]],
    where: str,
    dropped: list[str],
) -> list[dict[str, Any]]:
    """A user turn: its function responses as tool messages first (Chat wants them right
    after the assistant's calls), then its other parts as one user message."""
    tools: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            raise TranslationError(f"{where}: each part must be an object", param="contents")
        response = field(part, "functionResponse")
        if isinstance(response, dict):
            message = _tool_message(response, open_calls, answered, where, dropped)
            if message is not None:
                tools.append(message)
            continue
        made = _user_part(part, where, dropped)
        if made is not None:
            content.append(made)
    messages = list(tools)
    if content:
        only_text = all(p["type"] == "text" for p in content)
        text = "\n".join(p["text"] for p in content) if only_text else None
        messages.append({"role": "user", "content": text if only_text else content})
    return messages


def _tool_message(
    response: dict[str, Any],
    open_calls: list[tuple[str, str]],
    answered: list[tuple[str, str]],
    where: str,
    dropped: list[str],
) -> dict[str, Any] | None:
    """The result of the call it answers: the one with its id, else the first open call of
    its name (Gemini pairs them by name, in order). A second answer to a call already
    answered is left out (Gemini CLI repeats the function responses of a turn in a resumed
    session's history; Chat takes one result a call)."""
    name = response.get("name")
    given = response.get("id")
    found = next((c for c in open_calls if isinstance(given, str) and c[0] == given), None)
    if found is None:
        found = next((c for c in open_calls if c[1] == name), None)
    if found is None and any(c[0] == given or c[1] == name for c in answered):
        _note(dropped, "contents.parts.functionResponse")
        return None
    if found is None:
        raise TranslationError(
            f"{where}: functionResponse {name!r} answers no functionCall of an earlier model turn",
            param="contents",
        )
    open_calls.remove(found)
    answered.append(found)
    if response.get("parts"):
        _note(dropped, "contents.parts.functionResponse.parts")
    return {"role": "tool", "tool_call_id": found[0], "content": _result_text(response)}


def _result_text(response: dict[str, Any]) -> str:
    """A function's response as the tool message's text: the string itself when the response
    is `{"output": str}` or `{"result": str}` (as Gemini clients write it), else its JSON."""
    result = response.get("response")
    if isinstance(result, dict) and len(result) == 1:
        value = next(iter(result.values()))
        if next(iter(result)) in ("output", "result", "content") and isinstance(value, str):
            return value
    if isinstance(result, str):
        return result
    return orjson.dumps(result if result is not None else {}).decode()


def _kind(part: dict[str, Any]) -> str:
    return next((k for k in part if k not in ("thoughtSignature", "thought")), "")


def _user_part(part: dict[str, Any], where: str, dropped: list[str]) -> dict[str, Any] | None:
    text = part.get("text")
    if isinstance(text, str):
        return None if part.get("thought") is True or not text else {"type": "text", "text": text}
    inline = field(part, "inlineData")
    if isinstance(inline, dict):
        mime = str(field(inline, "mimeType") or "")
        data = inline.get("data")
        if not isinstance(data, str):
            raise TranslationError(f"{where}: inlineData needs data", param="contents")
        if mime.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
        if mime in _AUDIO:
            return {"type": "input_audio", "input_audio": {"data": data, "format": _AUDIO[mime]}}
        if mime in _FILES:
            file = {"filename": f"file.{_FILES[mime]}", "file_data": f"data:{mime};base64,{data}"}
            return {"type": "file", "file": file}
        raise TranslationError(
            f"{where}: inlineData of type {mime!r} cannot be sent to this model's provider",
            param="contents",
        )
    file_data = field(part, "fileData")
    if isinstance(file_data, dict):
        uri = str(field(file_data, "fileUri") or "")
        mime = str(field(file_data, "mimeType") or "")
        if uri.startswith(("http://", "https://")) and (mime.startswith("image/") or not mime):
            return {"type": "image_url", "image_url": {"url": uri}}
        raise TranslationError(
            f"{where}: fileData {uri[:80]!r} is a file only Gemini can read here (send images "
            "by http(s) URL or inline)",
            param="contents",
        )
    kind = _kind(part)
    if kind in ("executableCode", "codeExecutionResult", "videoMetadata"):
        _note(dropped, f"contents.parts.{kind}")
        return None
    if not kind:
        return None  # a bare thoughtSignature
    raise TranslationError(f"{where}: part {kind!r} is not supported here", param="contents")


def _note(dropped: list[str], name: str) -> None:
    if name not in dropped:
        dropped.append(name)


# generationConfig ---------------------------------------------------------------------------


def _generation_config(config: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        camel = "".join(w.capitalize() if i else w for i, w in enumerate(key.split("_")))
        if value is None:
            continue
        if camel in _SAMPLING:
            out[_SAMPLING[camel]] = value
        elif camel == "maxOutputTokens":
            out["max_tokens"] = value
        elif camel == "stopSequences":
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise TranslationError(
                    "stopSequences must be a list of strings", param="generationConfig"
                )
            if value:
                out["stop"] = value
        elif camel == "candidateCount":
            if value != 1:
                out["n"] = value
        elif camel == "responseModalities":
            if not isinstance(value, list) or any(str(m).upper() != "TEXT" for m in value):
                raise TranslationError(
                    "this model's provider answers with text only", param="responseModalities"
                )
        elif camel == "speechConfig":
            raise TranslationError(
                "speech output is not available from this model's provider", param="speechConfig"
            )
        elif camel in _READ_CONFIG:
            continue  # read below
        else:
            _note(dropped, f"generationConfig.{camel}")  # topK, logprobs, mediaResolution...
    out.update(_response_format(config))
    effort = _effort(field(config, "thinkingConfig"), dropped)
    if effort is not None:
        out["reasoning_effort"] = effort
    return out


def _response_format(config: dict[str, Any]) -> dict[str, Any]:
    mime = field(config, "responseMimeType")
    json_schema = field(config, "responseJsonSchema")
    schema = field(config, "responseSchema")
    if mime in (None, "text/plain") and json_schema is None and schema is None:
        return {}
    if mime == "text/x.enum":
        raise TranslationError(
            "an enum-typed text answer (text/x.enum) is not available from this model's "
            "provider; ask for application/json with a schema",
            param="responseMimeType",
        )
    if mime not in (None, "application/json"):
        raise TranslationError(
            f"responseMimeType {mime!r} is not supported here", param="responseMimeType"
        )
    if isinstance(json_schema, dict):
        chosen: dict[str, Any] | None = json_schema
    elif isinstance(schema, dict):
        chosen = json_schema_of(schema)
    else:
        chosen = None
    if chosen is None:
        return {"response_format": {"type": "json_object"}}
    spec = {"name": "response", "schema": chosen}
    return {"response_format": {"type": "json_schema", "json_schema": spec}}


def _effort(thinking: Any, dropped: list[str]) -> str | None:
    """reasoning_effort for a thinkingConfig: thinkingLevel by name, thinkingBudget by the
    budgets Google documents for its OpenAI-compatible endpoint (0 none, up to 1K low, up to
    8K medium, more high; -1, dynamic, the provider's default). includeThoughts has no Chat
    field: thoughts come back when the provider sends reasoning."""
    if not isinstance(thinking, dict):
        return None
    level = field(thinking, "thinkingLevel")
    if isinstance(level, str) and level.lower() in _LEVELS:
        return level.lower()
    if level is not None:
        _note(dropped, "generationConfig.thinkingConfig.thinkingLevel")
    budget = field(thinking, "thinkingBudget")
    if type(budget) is not int or budget < 0:
        return None
    if budget == 0:
        return "none"
    return next((effort for ceiling, effort in _EFFORT_CEILINGS if budget <= ceiling), "high")


# Tools --------------------------------------------------------------------------------------


def _tools(tools: Any, dropped: list[str]) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TranslationError("tools must be a list", param="tools")
    out: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            raise TranslationError("each tool must be an object", param="tools")
        for key, value in tool.items():
            if key in ("functionDeclarations", "function_declarations"):
                if value is not None and not isinstance(value, list):
                    raise TranslationError(f"tools.{key} must be a list", param="tools")
                out.extend(_function(d) for d in value or [])
            else:
                _note(dropped, f"tools.{key}")  # googleSearch, codeExecution, urlContext...
    return out


def _function(declaration: Any) -> dict[str, Any]:
    if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
        raise TranslationError("each functionDeclaration needs a name", param="tools")
    function: dict[str, Any] = {"name": declaration["name"]}
    if isinstance(declaration.get("description"), str):
        function["description"] = declaration["description"]
    schema = field(declaration, "parametersJsonSchema")
    if not isinstance(schema, dict):
        openapi = declaration.get("parameters")
        schema = json_schema_of(openapi) if isinstance(openapi, dict) else None
    function["parameters"] = schema or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def _tool_choice(config: Any, dropped: list[str]) -> str | dict[str, Any] | None:
    if not isinstance(config, dict):
        return None
    calling = field(config, "functionCallingConfig")
    if len(config) > (1 if calling is not None else 0):
        _note(dropped, "toolConfig.retrievalConfig")
    if not isinstance(calling, dict):
        return None
    mode = str(calling.get("mode") or "AUTO").upper()
    if mode not in _TOOL_MODES:
        raise TranslationError(f"unknown functionCallingConfig mode {mode!r}", param="toolConfig")
    names = field(calling, "allowedFunctionNames")
    if mode != "ANY" or not isinstance(names, list) or not names:
        return _TOOL_MODES[mode]
    if len(names) == 1:
        return {"type": "function", "function": {"name": str(names[0])}}
    listed = [{"type": "function", "function": {"name": str(n)}} for n in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": listed}}

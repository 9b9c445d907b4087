"""An Anthropic Messages request as a Chat Completions request (an Anthropic client, a
provider reached through chat: OpenAI, OpenAI-compatible servers, Gemini via its adapter).

Coding agents send the newest parts of the Messages API; each is translated when chat can
say it, dropped (and named in the returned list, which the client sees in the
`x-llmrelay-dropped` header) when losing it changes nothing the client relies on, and refused
with TranslationError naming the field only when the target cannot do it at all:

- `output_config.effort`, `thinking` (enabled with a budget, adaptive, disabled) ->
  `reasoning_effort` (anthropic_reasoning.py); `output_config.task_budget` dropped;
- `output_config.format` (and the older `output_format`) json_schema -> `response_format`;
- a `system` message among the turns (Claude Code puts one after the first user turn) ->
  joined, in order, to the leading system message: every chat server takes one system
  message first, not all take one later;
- `context_management`, `cache_control`, `top_k`, `service_tier` and unknown fields dropped;
- server tools (web_search, web_fetch, code_execution, tool_search) left out, named by
  their type without its date; a tool's `defer_loading`, `strict`, `input_examples` dropped
  (the tool itself is declared: a deferred tool a client loads later must be callable);
- thinking blocks llmrelay signed come back as the provider's own reasoning
  (anthropic_reasoning.py).
"""

from __future__ import annotations

from typing import Any, Final

from llmrelay.protocols import anthropic_reasoning
from llmrelay.protocols.anthropic_chat_messages import (
    anthropic_message_to_chat,
    anthropic_system_to_chat,
    anthropic_tool_choice_to_chat,
    anthropic_tools_to_chat,
)
from llmrelay.protocols.chat_anthropic_messages import note
from llmrelay.protocols.translation import TranslationError

_MAPPED: Final = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "output_format",
    }
)
_REFUSED: Final = {
    "mcp_servers": "MCP servers are not supported by this model",
    "container": "code execution containers are not supported by this model",
}
#: Server tools: run by Anthropic, not by the client; a provider reached through chat has
#: none of them, and the agent works on without.
SERVER_TOOLS: Final = ("web_search", "web_fetch", "code_execution", "tool_search")


def anthropic_request_to_chat(
    payload: dict[str, Any], *, upstream_model: str
) -> tuple[dict[str, Any], list[str]]:
    """The chat body for a Messages `payload`, and the client fields it left out."""
    dropped: list[str] = []
    for field, value in payload.items():
        if value is None or field in _MAPPED:
            continue
        if field in _REFUSED:
            raise TranslationError(_REFUSED[field], param=field)
        # top_k, service_tier, context_management and unknown extensions.
        note(dropped, field)
    effort = anthropic_reasoning.reasoning_effort(payload)
    raw_messages = payload.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise TranslationError("messages must be a non-empty list", param="messages")
    system = anthropic_system_to_chat(payload.get("system"), dropped)
    messages: list[dict[str, Any]] = []
    for message in raw_messages:
        if isinstance(message, dict) and message.get("role") == "system":
            system = _join_system(system, anthropic_system_to_chat(message.get("content"), dropped))
            continue
        messages.extend(_turn(message, dropped))
    if system is not None:
        messages.insert(0, system)
    body: dict[str, Any] = {"model": upstream_model, "messages": messages}
    for field in ("max_tokens", "temperature", "top_p"):
        if payload.get(field) is not None:
            body[field] = payload[field]
    stop = payload.get("stop_sequences")
    if isinstance(stop, list) and stop:
        body["stop"] = list(stop)
    elif stop is not None and stop != []:
        raise TranslationError("stop_sequences must be a list of strings", param="stop_sequences")
    if payload.get("stream") is not None:
        body["stream"] = bool(payload["stream"])
        if body["stream"]:
            # The Anthropic client is owed usage in its final message_delta.
            body["stream_options"] = {"include_usage": True}
    metadata = payload.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id"):
        body["user"] = str(metadata["user_id"])
    if effort is not None:
        body["reasoning_effort"] = effort
    _output(payload, body, dropped)
    _tools(payload, body, dropped)
    return body, dropped


def _turn(message: Any, dropped: list[str]) -> list[dict[str, Any]]:
    """One user or assistant turn as chat messages; an assistant turn's thinking blocks
    that llmrelay signed go back as its reasoning."""
    translated = anthropic_message_to_chat(message, dropped)
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return translated
    reasoning = anthropic_reasoning.unpack_turn(content, dropped)
    if reasoning:
        if not translated:  # a turn of thinking alone
            translated = [{"role": "assistant", "content": ""}]
        anthropic_reasoning.restore(translated[-1], reasoning)
    return translated


def _join_system(first: dict[str, Any] | None, more: dict[str, Any] | None) -> Any:
    if first is None or more is None:
        return first or more
    return {"role": "system", "content": [*_parts(first["content"]), *_parts(more["content"])]}


def _parts(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _output(payload: dict[str, Any], body: dict[str, Any], dropped: list[str]) -> None:
    """`output_config` (format, effort: read above; task_budget dropped) and the older
    top-level `output_format`."""
    config = payload.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise TranslationError("output_config must be an object", param="output_config")
    fmt, param = None, "output_config.format"
    for key, value in (config or {}).items():
        if value is None or key == "effort":
            continue
        if key == "format":
            fmt = value
        else:
            note(dropped, f"output_config.{key}")
    if fmt is None and payload.get("output_format") is not None:
        fmt, param = payload["output_format"], "output_format"
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    schema = fmt.get("schema") if isinstance(fmt, dict) else None
    if kind != "json_schema" or not isinstance(schema, dict):
        raise TranslationError(f"{param} must be a json_schema format with a schema", param=param)
    body["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }


def _tools(payload: dict[str, Any], body: dict[str, Any], dropped: list[str]) -> None:
    tools = payload.get("tools")
    if not tools:
        if payload.get("tool_choice") is not None:
            note(dropped, "tool_choice")
        return
    if not isinstance(tools, list):
        raise TranslationError("tools must be a list", param="tools")
    kept = []
    left_out: set[str] = set()
    for tool in tools:
        server = _server_tool(tool)
        if server is not None:
            note(dropped, server)
            left_out.add(str(tool.get("name")))
            continue
        if isinstance(tool, dict):
            for key in ("defer_loading", "strict", "input_examples", "eager_input_streaming"):
                if tool.get(key) is not None:
                    note(dropped, f"tools.{key}")
        kept.append(tool)
    if not kept:
        if payload.get("tool_choice") is not None:
            note(dropped, "tool_choice")
        return
    body["tools"] = anthropic_tools_to_chat(kept, dropped)
    choice = payload.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool" and choice.get("name") in left_out:
        note(dropped, "tool_choice")  # it named a server tool that was left out
        return
    if choice is not None:
        choice, parallel = anthropic_tool_choice_to_chat(choice)
        body["tool_choice"] = choice
        if not parallel:
            body["parallel_tool_calls"] = False


def _server_tool(tool: Any) -> str | None:
    """The name a server tool is known by (its type without the date), else None."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if not isinstance(kind, str):
        return None
    for name in SERVER_TOOLS:
        if kind == name or kind.startswith(name + "_"):
            return name
    return None

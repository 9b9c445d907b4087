"""Responses API tools as Chat Completions function tools, and their calls both ways.

A Chat model knows only functions, so every client-side tool kind of the Responses API
becomes one, under a name that maps back when the model calls it:

| Responses tool | Chat function | the call the client gets back |
| --- | --- | --- |
| `function` | the same | `function_call` |
| `namespace` (function, custom tools) | `NAMESPACE__NAME` | the inner kind, with `namespace` |
| `custom` (freeform text input) | `{"input": string}` | `custom_tool_call` with that `input` |
| `local_shell` | `local_shell` `{"command": [...], ...}` | `local_shell_call` (an `exec` action) |
| `apply_patch` | `apply_patch` `{"type", "path", "diff"}` | `apply_patch_call` (its `operation`) |

Built-in tools run inside OpenAI (web search, file search, code interpreter, hosted MCP,
image generation, computer use, tool search...): a provider reached through chat has none of
them, so they are left out and named in `dropped` (`tools.web_search`), and the agent works
on without them; a `tool_choice` that demands one is refused. `ToolNames` is what the answer's
translation needs to name the calls back (`tool_names`); the calls themselves, both ways, are
in `responses_tool_calls`.
"""

from __future__ import annotations

from typing import Any, Final

from llmrelay.protocols.errors import TranslationError

__all__ = [
    "APPLY_PATCH",
    "LOCAL_SHELL",
    "NAMESPACE_SEPARATOR",
    "ToolName",
    "ToolNames",
    "flat_name",
    "responses_tool_choice_to_chat",
    "responses_tools_to_chat",
    "tool_names",
]

#: Joins a namespace and a tool's name into one function name (both are [A-Za-z0-9_-]).
NAMESPACE_SEPARATOR: Final = "__"
#: Chat's simple tool_choice values, spelled the same in both protocols.
TOOL_CHOICE_MODES: Final = frozenset({"auto", "none", "required"})
#: Keys of a Responses function tool that have a Chat counterpart.
_FUNCTION_TOOL_KEYS: Final = frozenset({"type", "name", "description", "parameters", "strict"})
LOCAL_SHELL: Final = "local_shell"
APPLY_PATCH: Final = "apply_patch"
_LOCAL_SHELL_PARAMETERS: Final = {
    "type": "object",
    "properties": {
        "command": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The command and its arguments, as for execvp.",
        },
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["command"],
}
_APPLY_PATCH_PARAMETERS: Final = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
        "path": {"type": "string", "description": "The file, relative to the workspace."},
        "diff": {
            "type": "string",
            "description": "The V4A diff to apply (create_file and update_file).",
        },
    },
    "required": ["type", "path"],
}


class ToolName:
    """What a Chat function name stands for in the client's request."""

    __slots__ = ("kind", "name", "namespace")

    def __init__(self, kind: str, name: str, namespace: str | None = None) -> None:
        self.kind = kind  # "function", "custom", "local_shell" or "apply_patch"
        self.name = name
        self.namespace = namespace

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolName) and (self.kind, self.name, self.namespace) == (
            other.kind,
            other.name,
            other.namespace,
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.name, self.namespace))

    def __repr__(self) -> str:
        return f"ToolName({self.kind!r}, {self.name!r}, {self.namespace!r})"


#: Chat function name -> what it stands for; a name not in it is a plain function.
ToolNames = dict[str, ToolName]


def fail(message: str, param: str = "tools") -> TranslationError:
    return TranslationError(message, param=param)


def note(dropped: list[str], field: str) -> None:
    if field not in dropped:
        dropped.append(field)


def flat_name(namespace: Any, name: str) -> str:
    if isinstance(namespace, str) and namespace:
        return f"{namespace}{NAMESPACE_SEPARATOR}{name}"
    return name


def responses_tools_to_chat(tools: Any, dropped: list[str]) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise fail("tools must be a list")
    converted: list[dict[str, Any]] = []
    seen: set[str] = set()
    for tool in tools:
        if not isinstance(tool, dict):
            raise fail("each tool must be an object")
        kind = tool.get("type")
        if kind == "namespace":
            converted.extend(_namespace(tool, dropped))
        elif kind in ("function", "custom"):
            converted.append(_function_or_custom(tool, None, None, dropped))
        elif kind == LOCAL_SHELL:
            converted.append(_builtin_function(LOCAL_SHELL, _LOCAL_SHELL_PARAMETERS, tool))
        elif kind == APPLY_PATCH:
            converted.append(_builtin_function(APPLY_PATCH, _APPLY_PATCH_PARAMETERS, tool))
        elif isinstance(kind, str) and kind:
            # web_search, file_search, code_interpreter, mcp, image_generation, computer...
            note(dropped, f"tools.{kind}")
        else:
            raise fail("each tool needs a type")
    special = tool_names(tools)
    for tool in converted:
        name = tool["function"]["name"]
        if name in seen and name in special:
            # A call of that name could not be told back to the client as the tool it meant.
            raise fail(f"two tools are named {name!r} once namespaces are flattened")
        seen.add(name)
    return converted


def _namespace(tool: dict[str, Any], dropped: list[str]) -> list[dict[str, Any]]:
    namespace, inner = tool.get("name"), tool.get("tools")
    if not isinstance(namespace, str) or not namespace or not isinstance(inner, list):
        raise fail("a namespace tool needs a name and a list of tools")
    description = tool.get("description")
    context = description if isinstance(description, str) and description else None
    out = []
    for member in inner:
        if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
            kind = member.get("type") if isinstance(member, dict) else None
            raise fail(f"a namespace holds function and custom tools, not {kind!r}")
        out.append(_function_or_custom(member, namespace, context, dropped))
    return out


def _function_or_custom(
    tool: dict[str, Any], namespace: str | None, context: str | None, dropped: list[str]
) -> dict[str, Any]:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise fail(f"a {tool.get('type')} tool needs a name")
    function: dict[str, Any] = {"name": flat_name(namespace, name)}
    description = tool.get("description")
    parts = [p for p in (context and f"[{namespace}] {context}", description) if p]
    if tool.get("type") == "custom":
        parts.append(_custom_input_note(tool.get("format"), dropped))
        function["description"] = "\n\n".join(str(p) for p in parts)
        function["parameters"] = {
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The tool's input."}},
            "required": ["input"],
        }
        known = _CUSTOM_TOOL_KEYS
    else:
        if context:
            function["description"] = "\n\n".join(str(p) for p in parts)
        elif description is not None:
            function["description"] = description
        for key in ("parameters", "strict"):
            # Responses defaults `strict` to true; a Chat provider may not know strict mode
            # at all, so it is only sent when the client set it.
            if tool.get(key) is not None:
                function[key] = tool[key]
        known = _FUNCTION_TOOL_KEYS
    for key, value in tool.items():
        if key not in known and value is not None:
            note(dropped, f"tools.{key}")  # defer_loading, allowed_callers...
    return {"type": "function", "function": function}


_CUSTOM_TOOL_KEYS: Final = frozenset({"type", "name", "description", "format"})


def _custom_input_note(fmt: Any, dropped: list[str]) -> str:
    """A freeform tool's input format, told to the model: a Chat model cannot be held to a
    grammar, so the grammar is stated and its enforcement named as dropped."""
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return "Put the whole input, as free text, in `input`."
    if fmt.get("type") != "grammar":
        raise fail("a custom tool's format must be text or grammar")
    note(dropped, "tools.format")
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    return f"Put the whole input in `input`; it must follow this {syntax} grammar:\n{definition}"


def _builtin_function(name: str, parameters: dict[str, Any], tool: dict[str, Any]) -> Any:
    del tool  # the tool has no settings of its own
    description = (
        "Run a command on the user's machine."
        if name == LOCAL_SHELL
        else "Create, update or delete a file of the workspace with a V4A diff."
    )
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def tool_names(tools: Any) -> ToolNames:
    """The request's function names that stand for something else than a plain top-level
    function (namespaced, custom, local_shell, apply_patch); checked by the request's
    translation, so only what it accepted is read here."""
    names: ToolNames = {}
    if not isinstance(tools, list):
        return names
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "custom" and isinstance(tool.get("name"), str):
            names[tool["name"]] = ToolName("custom", tool["name"])
        elif kind in (LOCAL_SHELL, APPLY_PATCH):
            names[kind] = ToolName(kind, kind)
        elif kind == "namespace" and isinstance(tool.get("tools"), list):
            namespace = tool.get("name")
            for member in tool["tools"]:
                if isinstance(member, dict) and isinstance(member.get("name"), str):
                    member_kind = "custom" if member.get("type") == "custom" else "function"
                    flat = flat_name(namespace, member["name"])
                    names[flat] = ToolName(member_kind, member["name"], namespace)
    return names


def responses_tool_choice_to_chat(choice: Any, names: ToolNames) -> str | dict[str, Any]:
    if isinstance(choice, str) and choice in TOOL_CHOICE_MODES:
        return choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        name = choice.get("name")
        if kind in ("function", "custom") and isinstance(name, str) and name:
            flat = flat_name(choice.get("namespace"), name)
            return {"type": "function", "function": {"name": flat}}
        if kind in (LOCAL_SHELL, APPLY_PATCH) and kind in names:
            return {"type": "function", "function": {"name": kind}}
    raise fail(
        "tool_choice must be auto, none, required or a named function or custom tool",
        "tool_choice",
    )

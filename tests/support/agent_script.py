"""What the scripted agent upstream answers, decided once for every wire protocol.

A coding agent's task in the agent tests is one of two:

    plain      "... REPLY-<token> ..."      -> a short text that quotes REPLY-<token>
    tool loop  "... echo AGENT-<token> ..." -> a call of the client's own shell tool running
                                               that command; once a tool result holding
                                               AGENT-<token> is in the conversation, a final
                                               text quoting it: "The command printed AGENT-<token>."

and a second turn of the same conversation after the tool loop (the multi-turn task):

    recall     "... the command you ran earlier ..." -> "Recalled AGENT-<token>.", quoting the
                                               tool result found in the conversation's history
                                               (so the answer exists only if the client sent
                                               the first turn back)

and clients make side requests besides (titles, next-speaker checks, quota probes): a request
that demands JSON output with a schema gets a minimal valid instance of that schema.

Each protocol module (agent_openai_chat, agent_responses, agent_anthropic, agent_gemini) turns
its request into a `Conversation` and a `Decision` back into its own wire format, so the script
below is all the "model" there is, and a test can reason about every answer.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

#: The command a tool-loop prompt asks for, and the token it prints; `| tee FILE` after it
#: (kept in the command) also writes the token to FILE: a mark on disk that the tool ran.
COMMAND: Final = re.compile(r"echo (AGENT-[A-Za-z0-9]+)(?: \| tee [A-Za-z0-9_.-]+)?")
#: The second turn of the multi-turn task: it names no token, so only the history has it.
RECALL: Final = re.compile(r"the command you ran earlier")
#: A token as the tool printed it.
PRINTED: Final = re.compile(r"AGENT-[A-Za-z0-9]+")
#: The marker a plain prompt asks the answer to quote.
REPLY_MARKER: Final = re.compile(r"REPLY-[A-Za-z0-9]+")
#: The shell tools of the clients we run, by the name each gives it.
SHELL_TOOLS: Final = frozenset(
    {
        "Bash",  # Claude Code
        "bash",  # opencode
        "shell",  # Codex (classic), the Agents SDK tests' own function tool
        "shell_command",  # Codex
        "exec_command",  # Codex (unified exec)
        "local_shell",  # the Responses built-in
        "run_shell_command",  # Gemini CLI, Qwen Code
    }
)
#: Property names that hold the command line in a shell tool's arguments.
COMMAND_PROPERTIES: Final = ("command", "cmd")

Role = Literal["system", "user", "assistant", "tool_call", "tool_result"]
_CALL_IDS = itertools.count(1)


@dataclass(frozen=True)
class Tool:
    """A tool the client offers: its name, its parameters' JSON schema, and its kind
    (`function`, or a Responses built-in such as `local_shell`, or `custom` freeform)."""

    name: str
    schema: dict[str, Any] = field(default_factory=dict)
    kind: str = "function"


@dataclass(frozen=True)
class Turn:
    role: Role
    text: str


@dataclass(frozen=True)
class Conversation:
    turns: tuple[Turn, ...]
    tools: tuple[Tool, ...] = ()
    #: The JSON schema the answer must satisfy (a structured-output request), else None.
    output_schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class Reply:
    text: str


@dataclass(frozen=True)
class ToolCall:
    tool: Tool
    arguments: dict[str, Any]
    call_id: str

    @property
    def arguments_json(self) -> str:
        return orjson.dumps(self.arguments).decode()

    @property
    def command(self) -> str:
        """The command line, whatever shape the tool's schema gave it."""
        for name in COMMAND_PROPERTIES:
            value = self.arguments.get(name)
            if isinstance(value, str):
                return value
            if isinstance(value, list):
                return str(value[-1])
        return ""


Decision = Reply | ToolCall


def decide(conversation: Conversation) -> Decision:
    """The answer to one request (see the module's docstring)."""
    if conversation.output_schema is not None:
        instance = schema_instance(conversation.output_schema)
        return Reply(orjson.dumps(instance).decode())
    recalled = _recalled(conversation.turns)
    if recalled is not None:
        return Reply(recalled)
    asked = _asked_command(conversation.turns)
    shell = next((t for t in conversation.tools if t.name in SHELL_TOOLS), None)
    if asked is not None and shell is not None:
        position, command, token = asked
        results = [t.text for t in conversation.turns[position:] if t.role == "tool_result"]
        if any(token in text for text in results):
            return Reply(f"The command printed {token}.")
        if results:  # it ran but printed something else: say so rather than loop
            return Reply(f"The command did not print {token}: {results[-1][:200]}")
        return ToolCall(shell, shell_arguments(shell, command), f"call_{next(_CALL_IDS):06d}")
    return Reply(plain_answer(conversation.turns))


def summary(decision: Decision) -> str:
    """One line for the record of what was answered: `text: ...` or `call: NAME ARGUMENTS`."""
    if isinstance(decision, Reply):
        return f"text: {decision.text}"
    return f"call: {decision.tool.name} {decision.arguments_json}"


def plain_answer(turns: tuple[Turn, ...]) -> str:
    user = [t.text for t in turns if t.role == "user"]
    marker = REPLY_MARKER.search(user[-1]) if user else None
    return f"Hello from the agent upstream. {marker.group()}" if marker else "Hello."


def _recalled(turns: tuple[Turn, ...]) -> str | None:
    """The answer to a recall turn (the last user turn asks what the earlier command
    printed): the token of the last tool result before it, from the history. None when the
    last user turn is no recall."""
    users = [position for position, turn in enumerate(turns) if turn.role == "user"]
    if not users or RECALL.search(turns[users[-1]].text) is None:
        return None
    for turn in reversed(turns[: users[-1]]):
        found = PRINTED.search(turn.text) if turn.role == "tool_result" else None
        if found is not None:
            return f"Recalled {found.group()}."
    return "Nothing was run earlier in this conversation."


def _asked_command(turns: tuple[Turn, ...]) -> tuple[int, str, str] | None:
    """(position, command, token) of the last user turn that asks for the command."""
    for position in range(len(turns) - 1, -1, -1):
        turn = turns[position]
        if turn.role == "user":
            found = COMMAND.search(turn.text)
            if found is not None:
                return position, found.group(), found.group(1)
    return None


def shell_arguments(tool: Tool, command: str) -> dict[str, Any]:
    """Arguments for a shell tool from its schema: the command as a string or an argv list, as
    the schema says, and a sensible value for every other required property."""
    if tool.kind == "local_shell":
        return {"command": ["bash", "-lc", command]}
    if tool.kind == "custom":
        return {"input": command}
    properties: dict[str, Any] = tool.schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    name = next((n for n in COMMAND_PROPERTIES if n in properties), "command")
    kind = _type_of(properties.get(name, {}))
    arguments[name] = ["bash", "-lc", command] if kind == "array" else command
    for required in tool.schema.get("required") or []:
        if required in arguments:
            continue
        if required == "description":
            arguments[required] = "Print the token"
        else:
            arguments[required] = schema_instance(properties.get(required, {}), tool.schema)
    return arguments


def schema_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A minimal instance valid against `schema` (JSON Schema, or Gemini's OpenAPI subset with
    upper-case types): required properties only (all when none are required), the first enum
    value, the first branch of anyOf/oneOf, local $refs resolved."""
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return schema_instance(target, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for branch in ("anyOf", "oneOf", "allOf"):
        if schema.get(branch):
            return schema_instance(schema[branch][0], root)
    kind = _type_of(schema)
    if kind == "object":
        properties: dict[str, Any] = schema.get("properties") or {}
        names = schema.get("required") or list(properties)
        return {n: schema_instance(properties.get(n, {}), root) for n in names}
    if kind == "array":
        items = schema.get("items") or {}
        return [schema_instance(items, root) for _ in range(int(schema.get("minItems") or 0))]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "ok"


def _type_of(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "")
    if isinstance(kind, list):  # ["string", "null"]
        kind = next((k for k in kind if k != "null"), "null")
    if not kind and "properties" in schema:
        kind = "object"
    return str(kind).lower()


def estimate_tokens(data: bytes | str) -> int:
    """A rough token count (four bytes a token) for the usage each answer reports."""
    return max(1, len(data) // 4)

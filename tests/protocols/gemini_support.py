"""Helpers shared by the tests of the Chat Completions <-> Gemini translation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmrelay.protocols.chat_gemini import chat_request_to_gemini

FIXTURES = Path(__file__).parent / "fixtures" / "gemini"


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return loaded


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages) or [user("hi")], **fields}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def translated(**fields: Any) -> dict[str, Any]:
    return chat_request_to_gemini(chat(**fields))[0]


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}

"""A scripted upstream that reasons, for the reasoning round trips of Responses clients
(tests/e2e/test_responses_agents.py with the openai SDK, tests/agents/test_codex_reasoning.py
with the real Codex): Anthropic Messages (`POST /v1/messages`) and Gemini
(`POST /v1beta/models/MODEL:generateContent` and `:streamGenerateContent?alt=sse`), served on
loopback by a real uvicorn (tests/support/asgi_server.py).

The first turn thinks (an Anthropic thinking block with a signature; a Gemini thought part and
a function call with a thought signature) and calls `exec_command` with `{"cmd": COMMAND}`;
a turn whose request holds the tool's result answers `It printed RESULT.` Like the real APIs,
it answers 400 when the reasoning did not come back: Anthropic, thinking on, a tool loop whose
last assistant turn does not begin with the signed thinking block; Gemini, a model turn whose
function call lacks its thought signature. Every request body is kept (`bodies`).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.asgi_server import ServedApp

SIGNATURE = "EqQBCkYIBxgCKkDscripted-signature"
THOUGHT_SIGNATURE = "CiQBscripted-gemini-call-signature"
COMMAND = "echo reasoning-ok"


class ScriptedUpstream:
    """`with ScriptedUpstream() as upstream:` serving on `upstream.root_url`."""

    def __init__(self, command: str = COMMAND) -> None:
        self.command = command
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1beta/models/{rest:path}", self.gemini, methods=["POST"]),
            ]
        )

    def __enter__(self) -> ScriptedUpstream:
        self._served = ServedApp(self.app).__enter__()
        self.root_url = f"http://127.0.0.1:{self._served.port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.__exit__(*exc)

    def last(self, path: str) -> dict[str, Any]:
        with self._lock:
            return [body for where, body in self.bodies if where == path][-1]

    async def messages(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.bodies.append(("messages", body))
        refused = _anthropic_refusal(body)
        if refused is not None:
            error = {"type": "invalid_request_error", "message": refused}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        last = body["messages"][-1]["content"]
        result = next(
            (b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"), None
        )
        blocks: list[dict[str, Any]]
        if result is not None:
            blocks = [{"type": "text", "text": f"It printed {result['content']}."}]
        else:
            blocks = [
                {"type": "thinking", "thinking": "Run it.", "signature": SIGNATURE},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "exec_command",
                    "input": {"cmd": self.command},
                },
            ]
        stop = "end_turn" if result is not None else "tool_use"
        usage = {"input_tokens": 20, "output_tokens": 7}
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return JSONResponse(message)
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"message": {**message, "content": [], "stop_reason": None}})
        ]
        for index, block in enumerate(blocks):
            start: dict[str, Any]
            deltas: list[dict[str, Any]]
            if block["type"] == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ]
            elif block["type"] == "tool_use":
                start = {**block, "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
            else:
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": block["text"]}]
            events.append(("content_block_start", {"index": index, "content_block": start}))
            events += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
            events.append(("content_block_stop", {"index": index}))
        events.append(("message_delta", {"delta": {"stop_reason": stop}, "usage": usage}))
        events.append(("message_stop", {}))
        text = "".join(
            f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"
            for name, data in events
        )
        return StreamingResponse(iter([text.encode()]), media_type="text/event-stream")

    async def gemini(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.bodies.append(("gemini", body))
        refused = _gemini_refusal(body)
        if refused is not None:
            error = {"code": 400, "message": refused, "status": "INVALID_ARGUMENT"}
            return JSONResponse({"error": error}, status_code=400)
        last = body["contents"][-1]["parts"]
        answered = next((p for p in last if "functionResponse" in p), None)
        if answered is not None:
            output = answered["functionResponse"]["response"]
            parts: list[dict[str, Any]] = [{"text": f"It printed {json.dumps(output)}."}]
        else:
            parts = [
                {"text": "Run it.", "thought": True},
                {
                    "functionCall": {"name": "exec_command", "args": {"cmd": self.command}},
                    "thoughtSignature": THOUGHT_SIGNATURE,
                },
            ]
        event = {
            "responseId": "r1",
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 7},
        }
        if request.url.path.endswith(":generateContent"):
            return JSONResponse(event)
        data = f"data: {json.dumps(event)}\n\n".encode()
        return StreamingResponse(iter([data]), media_type="text/event-stream")


def _anthropic_refusal(body: dict[str, Any]) -> str | None:
    if (body.get("thinking") or {}).get("type") != "enabled":
        return None
    turns = [m for m in body["messages"] if m["role"] == "assistant"]
    content = turns[-1]["content"] if turns else None
    if not isinstance(content, list) or not any(b.get("type") == "tool_use" for b in content):
        return None
    first = content[0]
    if first.get("type") == "thinking" and first.get("signature") == SIGNATURE:
        return None
    return "Expected `thinking` or `redacted_thinking`, but found `tool_use`."


def _gemini_refusal(body: dict[str, Any]) -> str | None:
    for content in body["contents"]:
        for part in content["parts"] if content.get("role") == "model" else []:
            if "functionCall" in part and part.get("thoughtSignature") != THOUGHT_SIGNATURE:
                return "Function call is missing a thought_signature in functionCall parts."
    return None

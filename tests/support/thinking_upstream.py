"""A reasoning model on loopback: a real HTTP server speaking OpenAI Chat Completions (with
`reasoning_content`, as DeepSeek, vLLM and OpenRouter answer) and Gemini generateContent (with
thought parts and a `thoughtSignature` on the function call, as Gemini 2.5 and 3 answer),
streamed and not, so a gateway's reasoning round trips are tested against the wire formats.

One tool step per conversation: without a tool result in the request, it thinks (THOUGHT)
and calls the shell tool (a tool named as a client's shell tool, else the first declared)
with `{"command": "echo thinking-ok"}`; with one, it answers "The tool said: <result>".
Every request body is kept in `requests` (path, body); the Gemini signature it hands out is
SIGNATURE, so a test sees whether the next turn carried it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from aiohttp import web

from tests.support.agent_wire import sse_data
from tests.support.background_app import BackgroundApp
from tests.support.ports import free_port

THOUGHT: Final = "The user wants the files listed; call the tool."
SIGNATURE: Final = "Z2VtaW5pLXRob3VnaHQtc2lnbmF0dXJl"
ARGUMENTS: Final = {"command": "echo thinking-ok"}
#: Tool names taken for the shell tool (Claude Code's, opencode's...).
SHELL: Final = ("Bash", "bash", "shell")


@dataclass
class ThinkingUpstream:
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _served: BackgroundApp = field(default_factory=lambda: BackgroundApp("thinking-upstream"))

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ThinkingUpstream:
        self._served.start(self._app(), self.host, self.port)
        return self

    def stop(self) -> None:
        self._served.stop()

    def last(self, fragment: str) -> dict[str, Any]:
        return [body for path, body in self.requests if fragment in path][-1]

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1beta/models/{target}", self._gemini)
        return app

    # -- OpenAI Chat Completions ------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((request.path, body))
        messages = body.get("messages") or []
        results = [m.get("content") for m in messages if m.get("role") == "tool"]
        tools = body.get("tools") or []
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if results or not tools:
            delta: dict[str, Any] = {"content": f"The tool said: {results[-1] if results else ''}"}
            finish = "stop"
        else:
            names = [t["function"]["name"] for t in tools]
            name = next((n for n in names if n in SHELL), names[0])
            call = {
                "id": "call_think1",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(ARGUMENTS).decode()},
            }
            delta = {"content": None, "tool_calls": [call]}
            finish = "tool_calls"
        if not body.get("stream"):
            message = {"role": "assistant", "reasoning_content": THOUGHT, **delta}
            choice = {"index": 0, "message": message, "finish_reason": finish}
            answer = {"id": "chatcmpl-t", "object": "chat.completion", "choices": [choice]}
            return web.json_response({**answer, "usage": usage}, dumps=_dumps)
        head = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": body["model"]}
        chunks: list[dict[str, Any]] = [
            {"role": "assistant", "content": ""},
            {"reasoning_content": THOUGHT},
        ]
        if "tool_calls" in delta:
            chunks.append({"tool_calls": [{"index": 0, **delta["tool_calls"][0]}]})
        else:
            chunks.append(delta)
        events = [{**head, "choices": [{"index": 0, "delta": d}]} for d in chunks]
        events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        events.append({**head, "choices": [], "usage": usage})
        data = [sse_data(orjson.dumps(e)) for e in events] + [sse_data(b"[DONE]")]
        return await _sse(request, data)

    # -- Gemini ------------------------------------------------------------------------------

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((request.path, body))
        contents = body.get("contents") or []
        responses = [
            part["functionResponse"]["response"]
            for content in contents
            for part in content.get("parts") or []
            if "functionResponse" in part
        ]
        declarations = (body.get("tools") or [{}])[0].get("functionDeclarations") or []
        thought = {"text": THOUGHT, "thought": True}
        if responses or not declarations:
            said = orjson.dumps(responses[-1]).decode() if responses else ""
            parts: list[dict[str, Any]] = [thought, {"text": f"The tool said: {said}"}]
        else:
            names = [d["name"] for d in declarations]
            call = {"name": next((n for n in names if n in SHELL), names[0]), "args": ARGUMENTS}
            parts = [thought, {"functionCall": call, "thoughtSignature": SIGNATURE}]
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}
        answer = {"candidates": [candidate], "usageMetadata": usage, "responseId": "r1"}
        if not request.path.endswith(":streamGenerateContent"):
            return web.json_response(answer, dumps=_dumps)
        first = {"candidates": [{"content": {"role": "model", "parts": parts[:1]}}]}
        rest = {**candidate, "content": {"role": "model", "parts": parts[1:]}}
        data = [
            sse_data(orjson.dumps(first)),
            sse_data(orjson.dumps({**answer, "candidates": [rest]})),
        ]
        return await _sse(request, data)


async def _sse(request: web.Request, events: list[bytes]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for event in events:
        await response.write(event)
    await response.write_eof()
    return response


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()

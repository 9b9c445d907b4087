"""The scripted agent upstream: a real HTTP server that real coding agents and agent SDKs
(through llmrelay, or directly) can finish their tasks against.

It speaks four wire protocols on one port, each in its provider's exact format, streamed and
not, with usage in every answer:

    OpenAI Chat Completions  POST /v1/chat/completions                  (agent_openai_chat)
    OpenAI Responses         POST /v1/responses                         (agent_responses)
    Anthropic Messages       POST /v1/messages, /v1/messages/count_tokens (agent_anthropic)
    Gemini                   POST /v1beta/models/{model}:generateContent,
                             :streamGenerateContent?alt=sse, :countTokens (agent_gemini)
    model lists              GET /v1/models (Anthropic's shape with `anthropic-version`),
                             GET /v1beta/models, GET /v1beta/models/{model}

What it answers is decided by `agent_script.decide`, the same for every protocol. Every request
that arrives (any path, method, headers, body) is kept in `requests` with a one-line summary of
the answer, for tests to inspect and for the captured fixtures (tests/agents/captured/); a path
it does not serve is answered 404 in OpenAI's error shape and kept too.

It runs on loopback in a background thread with its own event loop, like
tests.support.mock_upstream, whose behaviours (failures, delays) it does not have: it is the
well-behaved model an agent needs, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.support import agent_anthropic, agent_gemini, agent_openai_chat, agent_responses
from tests.support.agent_script import Conversation, Decision, decide, summary
from tests.support.background_app import BackgroundApp
from tests.support.ports import free_port

#: What the model lists name (any model name is answered, listed or not).
LISTED_MODELS = ("agent-model",)


@dataclass
class AgentRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    #: The JSON body (None for a GET or a body that is not JSON).
    body: Any
    #: What was answered: `text: ...`, `call: NAME ARGUMENTS`, or `status: CODE`.
    answer: str = ""
    streamed: bool = False


@dataclass
class AgentUpstream:
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    requests: list[AgentRequest] = field(default_factory=list)
    listed_models: list[str] = field(default_factory=lambda: list(LISTED_MODELS))
    _served: BackgroundApp = field(default_factory=lambda: BackgroundApp("agent-upstream"))

    @property
    def root_url(self) -> str:
        """The base URL of the anthropic and gemini protocols (they add /v1, /v1beta)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL of the OpenAI protocols."""
        return f"{self.root_url}/v1"

    def start(self) -> AgentUpstream:
        self._served.start(self._app(), self.host, self.port)
        return self

    def stop(self) -> None:
        self._served.stop()

    def model_requests(self) -> list[AgentRequest]:
        """The requests that asked the model for an answer (not lists nor token counts)."""
        return [r for r in self.requests if r.answer.startswith(("text:", "call:"))]

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/{version:v1beta|v1}/models/{target}", self._gemini)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1beta/models", self._gemini_models)
        app.router.add_get("/v1beta/models/{model}", self._gemini_model)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    async def _receive(self, request: web.Request) -> tuple[AgentRequest, bytes]:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        received = AgentRequest(
            request.method, request.path, dict(request.query), dict(request.headers), body
        )
        self.requests.append(received)
        return received, raw

    # -- the protocols --------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        received, raw = await self._receive(request)
        body = received.body
        decision = self._decide(received, agent_openai_chat.conversation(body))
        usage = agent_openai_chat.usage(raw, decision)
        model = str(body.get("model"))
        if not body.get("stream"):
            return _json(agent_openai_chat.completion(model, decision, usage))
        include = bool((body.get("stream_options") or {}).get("include_usage"))
        events = agent_openai_chat.stream(model, decision, usage, include)
        return await _sse(request, received, events)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        received, raw = await self._receive(request)
        body = received.body
        decision = self._decide(received, agent_responses.conversation(body))
        usage = agent_responses.usage(raw, decision)
        model = str(body.get("model"))
        if not body.get("stream"):
            item = agent_responses.output_item(decision)
            return _json(agent_responses.response(body, model, item, usage))
        return await _sse(request, received, agent_responses.stream(body, model, decision, usage))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        received, raw = await self._receive(request)
        body = received.body
        decision = self._decide(received, agent_anthropic.conversation(body))
        usage = agent_anthropic.usage(raw, decision)
        model = str(body.get("model"))
        if not body.get("stream"):
            return _json(agent_anthropic.message(model, decision, usage))
        return await _sse(request, received, agent_anthropic.stream(model, decision, usage))

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        received, raw = await self._receive(request)
        received.answer = "count"
        return _json(agent_anthropic.count_tokens(raw))

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        received, raw = await self._receive(request)
        model, _, method = request.match_info["target"].partition(":")
        if method == "countTokens":
            received.answer = "count"
            return _json(agent_gemini.count_tokens(raw))
        if method not in ("generateContent", "streamGenerateContent"):
            return _not_found(received)
        decision = self._decide(received, agent_gemini.conversation(received.body))
        usage = agent_gemini.usage(raw, decision)
        if method == "generateContent":
            return _json(agent_gemini.response(model, decision, usage))
        return await _sse(request, received, agent_gemini.stream(model, decision, usage))

    def _decide(self, received: AgentRequest, conversation: Conversation) -> Decision:
        decision = decide(conversation)
        received.answer = summary(decision)
        return decision

    # -- model lists and the rest ---------------------------------------------------------

    async def _models(self, request: web.Request) -> web.StreamResponse:
        received, _ = await self._receive(request)
        received.answer = "models"
        if "anthropic-version" in request.headers:
            data = [
                {
                    "type": "model",
                    "id": name,
                    "display_name": name,
                    "created_at": "2025-01-01T00:00:00Z",
                }
                for name in self.listed_models
            ]
            first, last = self.listed_models[0], self.listed_models[-1]
            return _json({"data": data, "has_more": False, "first_id": first, "last_id": last})
        listed: list[dict[str, Any]] = [
            {"id": name, "object": "model", "created": 1735689600, "owned_by": "agent-upstream"}
            for name in self.listed_models
        ]
        return _json({"object": "list", "data": listed})

    async def _gemini_models(self, request: web.Request) -> web.StreamResponse:
        received, _ = await self._receive(request)
        received.answer = "models"
        return _json(agent_gemini.model_list(self.listed_models))

    async def _gemini_model(self, request: web.Request) -> web.StreamResponse:
        received, _ = await self._receive(request)
        received.answer = "models"
        return _json(agent_gemini.model_list([request.match_info["model"]])["models"][0])

    async def _unknown(self, request: web.Request) -> web.StreamResponse:
        received, _ = await self._receive(request)
        return _not_found(received)


def conversation_of(path: str, body: Any) -> Conversation | None:
    """The conversation of a model request to `path` in its protocol (None: not one), for
    replaying recorded requests (tests/agents/captured) through the script."""
    if path == "/v1/chat/completions":
        return agent_openai_chat.conversation(body)
    if path == "/v1/responses":
        return agent_responses.conversation(body)
    if path == "/v1/messages":
        return agent_anthropic.conversation(body)
    if path.startswith("/v1beta/models/") and path.endswith(
        (":generateContent", ":streamGenerateContent")
    ):
        return agent_gemini.conversation(body)
    return None


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


def _not_found(received: AgentRequest) -> web.Response:
    received.answer = "status: 404"
    error = {"message": f"no route {received.path}", "type": "invalid_request_error"}
    return _json({"error": {**error, "code": "not_found", "param": None}}, 404)


async def _sse(
    request: web.Request, received: AgentRequest, events: list[bytes]
) -> web.StreamResponse:
    received.streamed = True
    response = web.StreamResponse(
        headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
    )
    await response.prepare(request)
    for event in events:
        await response.write(event)
    await response.write_eof()
    return response

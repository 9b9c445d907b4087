"""A real HTTP server speaking the OpenAI wire format, with failures on demand.

It runs on loopback in a background thread (its own event loop), so a test can point a
gateway process at it and then inspect exactly what arrived (`requests`, with headers and
query). The behaviour is chosen by the upstream model name the gateway sends (see `_behaviour`):

    echo               echo the last user message (default)
    status-CODE        answer CODE with an OpenAI error body
    slow-MS            wait MS milliseconds before answering
    paced-MS           stream one word every MS milliseconds (a long, healthy stream)
    reset-after-N      stream N content chunks, then reset the connection (TCP RST); not
                       streamed, or N = 0: reset it before any byte of an answer
    trickle-MS         not streamed: the answer's body in 16-byte pieces, one every MS ms
    drop-after-N       stream N content chunks, then cut the connection (no finish reason);
                       with `tools` in the request: a tool call, cut after N argument pieces
    stall-after-N      stream N content chunks, then go silent
    error-after-N      stream N content chunks, then an error event that quotes the prompt
                       (as some providers' error texts do)
    no-done            stream a complete answer but never send [DONE] nor close
    malformed          stream with one malformed event in the middle
    burst              stream the whole answer in one write (all events in one TCP chunk)
    redirect           answer 307 to another path (a gateway must not follow it)
    fail-first-N       answer 503 to the first N requests for this model, then echo
    throttle-first-N   answer 429 with `Retry-After: 1` to the first N requests, then echo
    retry-after-S      answer 503 with `Retry-After: S` (seconds), always
    flood-N            stream N MiB of content as fast as the gateway takes it (`flooded`
                       counts the bytes written so far): a reader that does not keep up
                       holds the writes back
    no-usage           echo, but report no usage (no `usage` in the answer, no usage chunk)
    cached             echo, with half the prompt tokens reported as cached and one of the
                       completion tokens as reasoning (OpenAI's usage details)
    no-prefill...      answer 400 to a request whose last message is the assistant's (a server
                       that takes no prefill); else echo

A request whose last message is the assistant's and that sets `continue_final_message` (vLLM's
continuation, as a mid-stream rescue sends it) is answered, whatever the model, with only the
rest of the echo after that prefill, under its own id (`chatcmpl-continued`).

Any model put in `down` answers 503 (every protocol) until it is taken out: a route that
fails and then recovers. A breaker's trial call (header `x-llmrelay-trial`, sent by the
gateway's timer, not by a client) is kept in `trials` instead of `requests` and does not
count towards fail-first and throttle-first, so a trial arriving between two steps of a test
changes neither what the test reads nor what the upstream answers it.

The same server and port also speak three more providers' wire formats, so a gateway's
adapters meet the real thing; their base URL is the host root (`root_url`):

    anthropic     /v1/messages, /v1/messages/count_tokens          (tests.support.mock_anthropic)
    gemini        /v1beta/models/{model}:generateContent, :streamGenerateContent (mock_gemini)
    responses     /v1/responses on the OpenAI base URL (`base_url`)    (mock_responses)
    azure_openai  /openai/deployments/{deployment}/chat/completions and /embeddings: the OpenAI
                  answers behind Azure's checks (mock_azure; model `content-filter`)

Each protocol's model list (GET), and a credential check on every route: keys put in
`refused_keys` are refused as each provider refuses them (tests.support.mock_models).

Like OpenAI, which answers a request for `gpt-4o-mini` as `gpt-4o-mini-2024-07-18`, every
answer names a dated snapshot of the model asked for (`reported_model`): the gateway must
still show its clients only the virtual model.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import struct
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import orjson
from aiohttp import web

from tests.support.background_app import BackgroundApp
from tests.support.ports import free_port

#: What the model lists name by default: catalogue models (dated or not) and one it lacks.
LISTED_MODELS = ("gpt-4o-mini-2024-07-18", "gpt-4o", "claude-sonnet-4-5", "house-model-7b")


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    #: The query string (Azure's `api-version`, Gemini's `alt=sse`).
    query: dict[str, str] = field(default_factory=dict)


class ErrorReply(Protocol):
    """How one protocol words a failure, so the failures all protocols share are one code."""

    def __call__(self, status: int, *, retry_after: str | None = None) -> web.Response: ...


@dataclass
class MockUpstream:
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    requests: list[ReceivedRequest] = field(default_factory=list)
    #: Upstream models whose client (the gateway) went away before the answer was complete.
    abandoned: list[str] = field(default_factory=list)
    #: Requests seen per upstream model (for the fail-first / throttle-first behaviours).
    seen: dict[str, int] = field(default_factory=dict)
    #: Chat requests being answered now, and the most there ever were at once.
    in_flight: int = 0
    peak_in_flight: int = 0
    #: What the model lists name; a status they answer instead (None: the list); the list
    #: requests seen (apart from `requests`).
    listed_models: list[str] = field(default_factory=lambda: list(LISTED_MODELS))
    models_status: int | None = None
    listings: list[ReceivedRequest] = field(default_factory=list)
    #: Credentials refused on every route (a revoked key), and how many requests were.
    refused_keys: set[str] = field(default_factory=set)
    refusals: int = 0
    #: Credentials answered with a status of their own on every route while listed (an
    #: account over its quota: 429; an account whose backend fails: 500), and the requests
    #: each one got (neither kind enters `requests`).
    failing_keys: dict[str, int] = field(default_factory=dict)
    failed_by_key: dict[str, int] = field(default_factory=dict)
    #: Upstream models that answer 503 while they are listed here.
    down: set[str] = field(default_factory=set)
    #: Breaker trial calls from the gateway (header x-llmrelay-trial), apart from `requests`.
    trials: list[ReceivedRequest] = field(default_factory=list)
    #: flood-N: bytes of the answer written so far, per upstream model.
    flooded: dict[str, int] = field(default_factory=dict)
    _served: BackgroundApp = field(default_factory=lambda: BackgroundApp("mock-upstream"))

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The base URL of the anthropic, gemini and azure_openai protocols (they add paths)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> MockUpstream:
        self._served.start(self._app(), self.host, self.port)
        return self

    def stop(self) -> None:
        self._served.stop()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/elsewhere/chat/completions", self._chat)
        # Imported here, not at the top: these modules build on this one's helpers.
        from tests.support.mock_anthropic import AnthropicMessages
        from tests.support.mock_azure import AzureDeployments
        from tests.support.mock_gemini import GeminiModels
        from tests.support.mock_models import ModelLists
        from tests.support.mock_responses import OpenAIResponses

        ModelLists(self).install(app)

        anthropic = AnthropicMessages(self)
        azure = AzureDeployments(self)
        deployment = "/openai/deployments/{deployment}"
        app.router.add_post(f"{deployment}/chat/completions", azure.chat)
        app.router.add_post(f"{deployment}/embeddings", azure.embeddings)
        responses = OpenAIResponses(self)
        app.router.add_post("/v1/responses", responses.create)
        app.router.add_post("/v1/responses/compact", responses.compact)
        app.router.add_get("/v1/responses/{id}", responses.stored)
        app.router.add_post("/v1/responses/{id}/cancel", responses.stored)
        app.router.add_post("/v1/messages", anthropic.messages)
        app.router.add_post("/v1/messages/count_tokens", anthropic.count_tokens)
        app.router.add_post("/{version:v1beta|v1}/models/{target}", GeminiModels(self).target)
        return app

    def chat_requests(self) -> list[ReceivedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # -- handlers ----------------------------------------------------------------------------

    async def _receive(self, request: web.Request) -> dict[str, Any]:
        body: dict[str, Any] = orjson.loads(await request.read())
        headers, query = dict(request.headers), dict(request.query)
        received = ReceivedRequest(request.path, headers, body, query)
        (self.trials if _is_trial(request) else self.requests).append(received)
        return body

    async def _admit(
        self, request: web.Request, model: str, error: ErrorReply, *, overloaded: int = 503
    ) -> web.StreamResponse | None:
        """The failures every protocol shares (status, fail-first, throttle-first, slow), worded
        by `error`; None lets the answer go on. `overloaded` is what fail-first answers."""
        kind, arg = _behaviour(model)
        if model in self.down:
            return error(503)
        if kind == "status":
            return error(arg)
        if kind == "retry-after":
            return error(503, retry_after=str(arg))
        if kind in ("fail-first", "throttle-first") and not _is_trial(request):
            self.seen[model] = self.seen.get(model, 0) + 1
            if self.seen[model] <= arg:
                return error(overloaded) if kind == "fail-first" else error(429, retry_after="1")
        if kind == "slow" and not await _wait_unless_gone(request, arg / 1000):
            if not _is_trial(request):
                self.abandoned.append(model)
            return web.Response(status=499)
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if _is_trial(request):  # not a client's call: not counted in flight
            return await self._answer_chat(request, await self._receive(request))
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._answer_chat(request, await self._receive(request))
        finally:
            self.in_flight -= 1

    async def _answer_chat(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        model = str(body.get("model", ""))
        refused = await self._admit(request, model, _error)
        if refused is not None:
            return refused
        kind, arg = _behaviour(model)
        if kind == "redirect":
            raise web.HTTPTemporaryRedirect("/elsewhere/chat/completions")
        if kind == "reset" and (arg == 0 or not body.get("stream")):
            _reset(request)
            return web.Response(status=499)
        prefill = _prefill(body)
        if prefill is not None and model.startswith("no-prefill"):
            return _error(400)  # a server that takes no final assistant message
        reply = _last_user_text(body.get("messages", []))
        if prefill is not None and body.get("continue_final_message"):
            # vLLM's continuation: only the tokens after the prefill, under an id of its own
            reply = reply[len(prefill) :] if reply.startswith(prefill) else reply
            return await self._stream(request, body, reply, kind, arg, "chatcmpl-continued")
        if kind == "trickle" and not body.get("stream"):
            return await self._trickle(request, orjson.dumps(_completion(body, reply)), arg, model)
        if not body.get("stream"):
            return web.json_response(_completion(body, reply), dumps=_dumps)
        return await self._stream(request, body, reply, kind, arg)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        reply: str,
        kind: str,
        arg: int,
        ident: str = "chatcmpl-upstream",
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        model = reported_model(body)
        words = reply.split(" ") if reply else []
        chunk = partial(_chunk, ident=ident)
        if kind == "burst":
            await response.write(_burst(model, words, body, reply))
            await response.write_eof()
            return response
        if kind == "flood":
            return await self._flood(request, response, body, arg)
        await response.write(_event(chunk(model, {"role": "assistant", "content": ""})))
        if kind == "drop" and body.get("tools"):  # a tool call's arguments, cut mid-way
            return await _drop_tool_call(request, response, chunk(model, {}), arg)
        for i, word in enumerate(words):
            if kind == "reset" and i == arg:
                _reset(request)
                return response
            if kind in ("drop", "stall") and i == arg:
                if kind == "drop":
                    assert request.transport is not None
                    request.transport.abort()
                    return response
                await _wait_unless_gone(request, 3600)
                self.abandoned.append(str(body.get("model")))
                return response
            if kind == "error" and i == arg:
                quoted = {"message": f"cannot continue: {reply}", "type": "server_error"}
                await response.write(_event({"error": quoted}))
                await response.write_eof()
                return response
            if kind == "malformed" and i == 1:
                await response.write(b"data: {not json\n\n")
            piece = word + (" " if i < len(words) - 1 else "")
            await response.write(_event(chunk(model, {"content": piece})))
            await asyncio.sleep(arg / 1000 if kind == "paced" else 0.01)
        await response.write(_event(chunk(model, {}, "stop")))
        options = body.get("stream_options") or {}
        if options.get("include_usage") and kind != "no-usage":
            await response.write(
                _event({**chunk(model, {}), "choices": [], "usage": _usage(body, reply)})
            )
        if kind == "no-done":
            await _wait_unless_gone(request, 3600)
            self.abandoned.append(str(body.get("model")))
            return response
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _flood(
        self, request: web.Request, response: web.StreamResponse, body: dict[str, Any], mib: int
    ) -> web.StreamResponse:
        """flood-N: N MiB of content events, each write waiting only for the connection."""
        name = str(body.get("model"))
        model = reported_model(body)
        event = _event(_chunk(model, {"content": "x" * 4000}))
        self.flooded[name] = 0
        try:
            while self.flooded[name] < mib * 1024 * 1024:
                await response.write(event)
                self.flooded[name] += len(event)
            await response.write(_event(_chunk(model, {}, "stop")))
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = _usage(body, "flood")
                await response.write(_event({**_chunk(model, {}), "choices": [], "usage": usage}))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the gateway let go of the stream
            self.abandoned.append(name)
        return response

    async def _trickle(
        self, request: web.Request, data: bytes, pause_ms: int, model: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "application/json"})
        await response.prepare(request)
        for start in range(0, len(data), 16):
            if not await _wait_unless_gone(request, pause_ms / 1000):
                if not _is_trial(request):
                    self.abandoned.append(model)
                return response
            await response.write(data[start : start + 16])
        await response.write_eof()
        return response

    async def _embeddings(self, request: web.Request) -> web.Response:
        return self._answer_embeddings(await self._receive(request))

    def _answer_embeddings(self, body: dict[str, Any]) -> web.Response:
        kind, arg = _behaviour(str(body.get("model", "")))
        if body.get("model") in self.down:
            return _error(503)
        if kind == "status":
            return _error(arg)
        if kind in ("fail-first", "throttle-first"):
            model = str(body.get("model"))
            self.seen[model] = self.seen.get(model, 0) + 1
            if self.seen[model] <= arg:
                return _error(503) if kind == "fail-first" else _error(429, retry_after="1")
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(inputs):
            vector = [float(len(str(text))), 0.5, -0.25]
            encoded: Any = (
                base64.b64encode(struct.pack("<3f", *vector)).decode() if as_base64 else vector
            )
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": reported_model(body),
                "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
            },
            dumps=_dumps,
        )


async def _wait_unless_gone(request: web.Request, seconds: float) -> bool:
    """Sleep up to `seconds`; False as soon as the client's connection is gone."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        transport = request.transport
        if transport is None or transport.is_closing():
            return False
        await asyncio.sleep(0.02)
    return True


def _is_trial(request: web.Request) -> bool:
    return "x-llmrelay-trial" in request.headers


def _reset(request: web.Request) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0), as a crashed peer or a middlebox
    does, rather than the orderly FIN of `drop`."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def reported_model(body: dict[str, Any]) -> str:
    return f"{body.get('model')}-2024-07-18"


def _behaviour(model: str) -> tuple[str, int]:
    for prefix, kind in (
        ("status-", "status"),
        ("slow-", "slow"),
        ("paced-", "paced"),
        ("reset-after-", "reset"),
        ("trickle-", "trickle"),
        ("drop-after-", "drop"),
        ("stall-after-", "stall"),
        ("error-after-", "error"),
        ("fail-first-", "fail-first"),
        ("throttle-first-", "throttle-first"),
        ("retry-after-", "retry-after"),
        ("flood-", "flood"),
    ):
        if model.startswith(prefix):  # the number, then anything (to tell routes apart)
            digits = re.match(r"\d+", model[len(prefix) :])
            return kind, int(digits.group()) if digits else 0
    if model in ("no-done", "malformed", "redirect", "burst", "no-usage", "cached"):
        return model, 0
    if model in ("overloaded-midstream", "content-filter"):  # anthropic, azure_openai
        return model, 0
    return "echo", 0


async def _drop_tool_call(
    request: web.Request, response: web.StreamResponse, template: dict[str, Any], pieces: int
) -> web.StreamResponse:
    """drop-after-N with `tools`: a tool call whose arguments stop after N pieces."""
    call = {"index": 0, "id": "call_1", "type": "function"}
    opening = {**call, "function": {"name": "lookup", "arguments": ""}}
    deltas = [{"tool_calls": [opening]}]
    deltas += [
        {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        for piece in ('{"q', 'uery": "', "weather ", "in Paris", '"}')[:pieces]
    ]
    for delta in deltas:
        event = {**template, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        await response.write(_event(event))
    assert request.transport is not None
    request.transport.abort()
    return response


def _prefill(body: dict[str, Any]) -> str | None:
    """The text of a final assistant message (a prefill to continue), if the request ends so."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        content = last.get("content")
        return content if isinstance(content, str) else ""
    return None


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def _usage(body: dict[str, Any], reply: str) -> dict[str, int]:
    prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    completion = len(reply.split())
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if body.get("model") == "cached":
        usage["prompt_tokens_details"] = {"cached_tokens": prompt // 2}
        usage["completion_tokens_details"] = {"reasoning_tokens": min(1, completion)}
    return usage


def _completion(body: dict[str, Any], reply: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reported_model(body),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
            }
        ],
        **({} if body.get("model") == "no-usage" else {"usage": _usage(body, reply)}),
    }


def _chunk(
    model: Any, delta: dict[str, Any], finish: str | None = None, ident: str = "chatcmpl-upstream"
) -> dict[str, Any]:
    return {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _burst(model: Any, words: list[str], body: dict[str, Any], reply: str) -> bytes:
    events = [_chunk(model, {"role": "assistant", "content": ""})]
    events += [
        _chunk(model, {"content": w + (" " if i < len(words) - 1 else "")})
        for i, w in enumerate(words)
    ]
    events.append(_chunk(model, {}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append({**_chunk(model, {}), "choices": [], "usage": _usage(body, reply)})
    return b"".join(_event(e) for e in events) + b"data: [DONE]\n\n"


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _error(status: int, *, retry_after: str | None = None) -> web.Response:
    code = "context_length_exceeded" if status == 400 else None
    return web.json_response(
        {
            "error": {
                "message": f"upstream says {status} (secret sk-upstream-abcdef123456)",
                "type": "upstream_test",
                "code": code,
                "param": None,
            }
        },
        status=status,
        dumps=_dumps,
        headers={"Retry-After": retry_after} if retry_after else None,
    )

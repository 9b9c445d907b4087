"""OpenAI's Responses API on the mock server: `POST /v1/responses`, streamed or not.

Echoes the text of the last user input (a string `input`, or the last user message item's
text), like the chat handler. Each answer gets a new `resp_...` id, and `previous_response_id`
must name one this server gave out (else 404, as OpenAI answers for a response it does not
hold): tests can see a continued conversation reach the provider that holds it. Failures
(`status-CODE`, `fail-first-N`, ...) are the server's shared ones.

Background mode (`background: true`), as OpenAI runs it: the create call answers at once with
the response `queued`; `GET /v1/responses/{id}` shows it `in_progress` until it is done
(`slow-MS`: MS milliseconds after the create; else at once), then `completed`; a cancel before
that leaves it `cancelled` for good.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import orjson
from aiohttp import web

from tests.support.mock_upstream import MockUpstream, ReceivedRequest, _behaviour, _error

_IDS = itertools.count(1)


class OpenAIResponses:
    def __init__(self, server: MockUpstream) -> None:
        self.server = server
        self.issued: dict[str, dict[str, Any]] = {}
        #: Background responses: id -> when (time.monotonic()) it is done.
        self.ready_at: dict[str, float] = {}

    async def stored(self, request: web.Request) -> web.Response:
        """GET /v1/responses/{id}, POST /v1/responses/{id}/cancel."""
        self.server.requests.append(
            ReceivedRequest(request.path, dict(request.headers), {}, dict(request.query))
        )
        response_id = request.match_info["id"]
        found = self.issued.get(response_id)
        if found is None:
            return web.json_response(
                {"error": {"message": "not found", "type": "invalid_request_error"}}, status=404
            )
        ready_at = self.ready_at.get(response_id)
        running = ready_at is not None and time.monotonic() < ready_at
        if request.method == "POST":
            found = {**found, "status": "cancelled"}
            if running:  # a background response stops for good
                found["output"], found["usage"] = [], None
                self.issued[response_id] = found
                self.ready_at.pop(response_id)
        elif running and found["status"] == "completed":
            found = {**found, "status": "in_progress", "output": [], "usage": None}
        return web.json_response(found, dumps=_dumps)

    async def compact(self, request: web.Request) -> web.Response:
        body = await self.server._receive(request)
        compacted = {
            "id": f"cmp_mock{next(_IDS):06d}",
            "object": "response.compaction",
            "model": f"{body.get('model')}-2025-03-11",
            "output": [{"type": "compaction", "encrypted_content": "opaque"}],
        }
        return web.json_response(compacted, dumps=_dumps)

    async def create(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._receive(request)
        model = str(body.get("model", ""))
        kind, delay_ms = _behaviour(model)
        background = body.get("background") is True
        if not (background and kind == "slow"):  # a slow background response answers at once
            refused = await self.server._admit(request, model, _error)
            if refused is not None:
                return refused
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.issued:
            return web.json_response(
                {
                    "error": {
                        "message": f"Response '{previous}' not found",
                        "type": "invalid_request_error",
                        "param": "previous_response_id",
                        "code": None,
                    }
                },
                status=404,
            )
        response_id = f"resp_mock{next(_IDS):06d}"
        text = _input_text(body.get("input"))
        done = self.issued[response_id] = _response(response_id, model, text, "completed")
        if background:
            done["background"] = True
            self.ready_at[response_id] = time.monotonic() + (
                delay_ms / 1000 if kind == "slow" else 0
            )
            queued = {**done, "status": "queued", "output": [], "usage": None}
            return web.json_response(queued, dumps=_dumps)
        if body.get("stream") is not True:
            return web.json_response(done, dumps=_dumps)
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        sequence = itertools.count()
        item = done["output"][0]

        async def send(kind: str, **fields: Any) -> None:
            data = {"type": kind, "sequence_number": next(sequence), **fields}
            await stream.write(
                b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
            )

        started = _response(response_id, model, "", "in_progress")
        started["output"], started["usage"] = [], None
        await send("response.created", response=started)
        await send("response.in_progress", response=started)
        added = {**item, "status": "in_progress", "content": []}
        await send("response.output_item.added", output_index=0, item=added)
        part = {"type": "output_text", "text": "", "annotations": []}
        await send(
            "response.content_part.added",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            part=part,
        )
        words = text.split(" ")
        for i, word in enumerate(words):
            delta = word + (" " if i < len(words) - 1 else "")
            await send(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=0,
                content_index=0,
                delta=delta,
                logprobs=[],
            )
        await send(
            "response.output_text.done",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            text=text,
            logprobs=[],
        )
        await send(
            "response.content_part.done",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            part={**part, "text": text},
        )
        await send("response.output_item.done", output_index=0, item=item)
        await send("response.completed", response=done)
        await stream.write_eof()
        return stream


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _input_text(given: Any) -> str:
    if isinstance(given, str):
        return given
    text = ""
    for item in given if isinstance(given, list) else []:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                text = content
            elif isinstance(content, list):
                text = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return text


def _response(response_id: str, model: str, text: str, status: str) -> dict[str, Any]:
    words = len(text.split())
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": f"{model}-2025-03-11",
        "output": [
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": words,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": words,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2 * words,
        },
    }

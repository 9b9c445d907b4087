"""Usage taken from streams of every protocol, through the real stream relays, on golden
streams shaped like the providers' documentation examples; and streams that end without
usage, whose records are estimated and flagged."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.messages_relay import MessagesStreamRelay
from llmrelay.gateway.relay import ChatStreamRelay
from llmrelay.gateway.responses_relay import ResponsesStreamRelay
from llmrelay.gateway.stream_relay import StreamRelay
from llmrelay.metering.usage import Usage
from llmrelay.protocols.openai import ModelRename
from tests.gateway.test_relay import ROUTE, ChunkedBody


def _data(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _named(kind: str, event: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\n" + _data({"type": kind, **event})


async def _run(relay: StreamRelay) -> bytes:
    await relay.prime(Deadlines(asyncio.get_running_loop()))
    return await relay.read_rest()


def _chat(record: CallRecord, chunks: list[bytes], *, usage_coming: bool) -> ChatStreamRelay:
    return ChatStreamRelay(
        ROUTE,
        ChunkedBody(chunks),
        request_id="req",
        choices=1,
        usage_requested=False,
        usage_coming=usage_coming,
        record=record,
        rename=ModelRename("chat"),
        on_malformed=lambda: None,
        on_end=lambda r: None,
    )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return _data(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "gpt-4o-2024-08-06",
            "choices": [choice],
            "usage": None,
        }
    )


async def test_an_openai_chat_stream_reports_its_buckets_in_the_last_chunk() -> None:
    # https://platform.openai.com/docs/api-reference/chat/streaming (stream_options.include_usage)
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "total_tokens": 1230,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 10, "audio_tokens": 0},
    }
    chunks = [
        _chunk({"role": "assistant", "content": "", "refusal": None}),
        _chunk({"content": "Hello"}),
        _chunk({}, "stop"),
        _data(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "gpt-4o-2024-08-06",
                "choices": [],
                "usage": usage,
            }
        ),
        b"data: [DONE]\n\n",
    ]
    record = CallRecord("req", "chat.completions", 0.0)
    out = await _run(_chat(record, chunks, usage_coming=True))
    assert b'"usage":{' not in out  # the client did not ask: the gateway's chunk is withheld
    assert record.settle_usage() == Usage(input=176, output=30, cached_input=1024, reasoning=10)
    assert record.usage_source == "reported"


async def test_a_chat_stream_that_ends_without_usage_is_estimated_and_flagged() -> None:
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": word}) for word in ("One", " two", " three")]
    chunks += [_chunk({}, "stop"), b"data: [DONE]\n\n"]
    record = CallRecord("req", "chat.completions", 0.0)
    record.stream = True
    record.payload = {"messages": [{"role": "user", "content": "count to three"}]}
    await _run(_chat(record, chunks, usage_coming=False))
    usage = record.settle_usage()
    assert record.usage_source == "estimated"
    assert usage is not None and usage.output == 4  # three words and the finish, after the role
    assert usage.input == 3 + 1 + 3  # framing, the role, "count to three"


async def test_an_anthropic_stream_reports_input_at_the_start_and_output_at_the_end() -> None:
    # https://docs.anthropic.com/en/docs/build-with-claude/streaming (the basic example,
    # with the cache fields the API reports)
    start_usage = {
        "input_tokens": 25,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
        "stop_reason": None,
        "usage": start_usage,
    }
    chunks = [
        _named("message_start", {"message": message}),
        _named("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        _named("ping", {}),
        _named(
            "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hello"}}
        ),
        _named("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "!"}}),
        _named("content_block_stop", {"index": 0}),
        _named(
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 15},
            },
        ),
        _named("message_stop", {}),
    ]
    record = CallRecord("req", "messages", 0.0)
    relay = MessagesStreamRelay(
        ROUTE,
        ChunkedBody(chunks),
        request_id="req",
        virtual_model="claude",
        record=record,
        on_malformed=lambda: None,
        on_end=lambda r: None,
    )
    out = await _run(relay)
    assert b'"model":"claude"' in out
    assert record.settle_usage() == Usage(input=25, output=15, cached_input=2000, cache_write=100)


async def test_a_responses_stream_reports_usage_on_completion() -> None:
    # https://platform.openai.com/docs/api-reference/responses-streaming (response.completed)
    usage = {
        "input_tokens": 300,
        "input_tokens_details": {"cached_tokens": 256},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 340,
    }
    response = {"id": "resp_1", "object": "response", "model": "gpt-4.1", "status": "in_progress"}
    chunks = [
        _named("response.created", {"response": response}),
        _named(
            "response.output_text.delta",
            {"item_id": "m", "output_index": 0, "content_index": 0, "delta": "Hi"},
        ),
        _named(
            "response.completed", {"response": {**response, "status": "completed", "usage": usage}}
        ),
    ]
    record = CallRecord("req", "responses", 0.0)
    relay = ResponsesStreamRelay(
        ROUTE,
        ChunkedBody(chunks),
        request_id="req",
        virtual_model="r",
        record=record,
        on_malformed=lambda: None,
        on_response_id=lambda _route, _id: None,
        on_end=lambda r: None,
    )
    await _run(relay)
    assert record.settle_usage() == Usage(input=44, output=40, cached_input=256, reasoning=12)

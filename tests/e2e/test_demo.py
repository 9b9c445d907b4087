"""`llmrelay serve --demo`: a first chat request with no provider account."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess


def _demo_key(process: GatewayProcess) -> str:
    match = re.search(r"API key: (sk-lr-\S+)", process.logs())
    assert match, process.logs()
    return match.group(1)


def _last_record(process: GatewayProcess) -> tuple[bool, int | None, int | None]:
    """(stream, prompt tokens, completion tokens) of the newest request record."""
    path = process.database_url.removeprefix("sqlite:///")
    deadline = time.monotonic() + 5
    while True:
        with sqlite3.connect(path) as db:
            row = db.execute(
                "SELECT stream, prompt_tokens, completion_tokens FROM request_records"
                " ORDER BY created_at DESC LIMIT 1"
            ).fetchone()
        if (row is not None and row[0]) or time.monotonic() > deadline:
            assert row is not None
            return bool(row[0]), row[1], row[2]
        time.sleep(0.05)


def test_demo_answers_chat_stream_and_embeddings(tmp_path: Path, closing: Closing) -> None:
    process = GatewayProcess(tmp_path, demo=True).start()
    try:
        key = _demo_key(process)
        client = closing(openai.OpenAI(api_key=key, base_url=process.base_url, max_retries=0))
        reply = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "Hello from the demo"}]
        )
        assert reply.choices[0].message.content == "Hello from the demo"
        assert reply.model == "demo"
        assert reply.usage is not None and reply.usage.completion_tokens > 0

        chunks = list(
            client.chat.completions.create(
                model="demo",
                messages=[{"role": "user", "content": "one two three four five six"}],
                stream=True,
            )
        )
        pieces = [
            c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
        ]
        assert "".join(pieces) == "one two three four five six"
        assert len(pieces) >= 3
        # Metered, though the client asked for no usage: the record has the tokens, the
        # client got no usage chunk.
        assert all(c.usage is None for c in chunks)
        streamed = _last_record(process)
        assert streamed[0] is True and streamed[1] and streamed[2]

        first = client.embeddings.create(model="demo-embedding", input="same text")
        second = client.embeddings.create(
            model="demo-embedding", input="same text", encoding_format="float"
        )
        assert len(first.data[0].embedding) == 64
        # Deterministic; base64 carries float32, so equal to float32 precision.
        assert first.data[0].embedding == pytest.approx(second.data[0].embedding, rel=1e-6)
        assert sum(v * v for v in second.data[0].embedding) == pytest.approx(1.0)
        other = client.embeddings.create(
            model="demo-embedding", input="other text", encoding_format="float"
        )
        assert other.data[0].embedding != second.data[0].embedding

        # The README's Anthropic example: the same demo model through /v1/messages.
        with anthropic.Anthropic(api_key=key, base_url=process.url, max_retries=0) as claude:
            message = claude.messages.create(
                model="demo", max_tokens=100, messages=[{"role": "user", "content": "Hello!"}]
            )
            assert message.content[0].type == "text" and message.content[0].text == "Hello!"
            with claude.messages.stream(
                model="demo", max_tokens=100, messages=[{"role": "user", "content": "a b c d"}]
            ) as stream:
                assert "".join(stream.text_stream) == "a b c d"
        responded = client.responses.create(model="demo", input="via responses")
        assert responded.output_text == "via responses"
    finally:
        assert process.stop() == 0

    again = GatewayProcess(tmp_path, demo=True).start()
    try:
        assert _demo_key(again) == key  # the same demo key on every start
        # Seeding is idempotent: the second start changed nothing, so no new generation.
        assert httpx.get(f"{again.url}/readyz").json()["snapshot_generation"] == 1
    finally:
        assert again.stop() == 0

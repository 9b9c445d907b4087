"""`llmrelay serve --demo`: a first chat request with no provider account."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.gateway_process import GatewayProcess


def _demo_key(process: GatewayProcess) -> str:
    match = re.search(r"API key: (sk-lr-\S+)", process.logs())
    assert match, process.logs()
    return match.group(1)


def test_demo_answers_chat_stream_and_embeddings(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path, demo=True).start()
    try:
        key = _demo_key(process)
        client = openai.OpenAI(api_key=key, base_url=process.base_url, max_retries=0)
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
    finally:
        assert process.stop() == 0

    again = GatewayProcess(tmp_path, demo=True).start()
    try:
        assert _demo_key(again) == key  # the same demo key on every start
        # Seeding is idempotent: the second start changed nothing, so no new generation.
        assert httpx.get(f"{again.url}/readyz").json()["snapshot_generation"] == 1
    finally:
        assert again.stop() == 0

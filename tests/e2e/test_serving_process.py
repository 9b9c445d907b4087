"""What a serving process holds (issue 36 item 3): a real `serve` opens a sealed provider
credential and answers through it without `cryptography` loaded (AES-GCM comes from the
interpreter's own libcrypto, store/aead.py); its memory is read from /proc."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "serving-process-key-0123456789"
SECRET = "sk-sealed-upstream-secret-0042"


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {SECRET}}}
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}
projects:
  - name: p
    keys: [{{name: main, key: {KEY}}}]
"""
    # A process of its own (not forked from the test zygote, which imported the whole app
    # and its test dependencies): what it maps is what `serve` itself loaded.
    env = {"LLMRELAY_TEST_ZYGOTE": "0"}
    yield from serving(Path(tmp_path_factory.mktemp("serving-process")), config, env)


def _mapped_files(pid: int) -> set[str]:
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6}


def test_a_sealed_credential_is_opened_without_cryptography(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0) as client:
        answer = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "sealed hello"}]
        )
    assert answer.choices[0].message.content == "sealed hello"
    sent = upstream.chat_requests()[-1]
    assert sent.headers["Authorization"] == f"Bearer {SECRET}"  # unsealed from the database
    assert gateway.process is not None
    mapped = _mapped_files(gateway.process.pid)
    assert any("_hashlib" in path for path in mapped), sorted(mapped)[:20]
    assert not [path for path in mapped if "/cryptography/" in path]

"""The real Claude Code through llmrelay to a reasoning model that is no Anthropic model: the
reasoning a provider gave (OpenAI-compatible `reasoning_content`; Gemini's thought parts and
its function call's `thoughtSignature`) reaches Claude Code as signed thinking blocks, Claude
Code keeps them in its history, and the next request of its tool loop carries them back to
the provider as its own (the scripted agent upstream of the matrix gives no reasoning, so
this is the one place the round trip meets the real client).

The provider is tests/support/thinking_upstream.py: it thinks, calls the shell tool
(`echo thinking-ok`), then quotes the tool's result.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clients import CLAUDE_CODE, Endpoint, need, run
from tests.support.gateway_process import GatewayProcess
from tests.support.thinking_upstream import SIGNATURE, THOUGHT, ThinkingUpstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

KEY = "agent-thinking-key-0123456789"
SECRET = "sk-thinking-upstream-secret"


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThinkingUpstream]:
    server = ThinkingUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(
    upstream: ThinkingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    root = upstream.root_url
    config = f"""
providers:
  - {{slug: compat, type: openai_compatible, base_url: "{root}/v1", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
models:
  - {{name: think-compat, routes: [{{provider: compat, upstream_model: r1}}]}}
  - {{name: think-gemini, routes: [{{provider: google, upstream_model: gemini-think}}]}}
projects:
  - name: agents
    keys: [{{name: k, key: {KEY}}}]
"""
    process = GatewayProcess(tmp_path_factory.mktemp("gateway"), config=config)
    process.start(timeout_s=90)  # generous: other agent modules may be loading the machine
    yield process
    assert process.stop() == 0, process.logs()


def _tool_loop_requests(upstream: ThinkingUpstream, fragment: str) -> list[dict[str, Any]]:
    """The model requests of the tool loop: those that declare the shell tool."""
    return [
        body
        for path, body in upstream.requests
        if fragment in path and ("Bash" in str(body.get("tools")))
    ]


@pytest.mark.parametrize(
    ("model", "fragment"),
    [("think-compat", "/chat/completions"), ("think-gemini", "/v1beta/models/")],
    ids=["openai_compatible", "gemini"],
)
def test_claude_code_carries_the_providers_reasoning_back(
    gateway: GatewayProcess,
    upstream: ThinkingUpstream,
    tmp_path: Path,
    model: str,
    fragment: str,
) -> None:
    need(CLAUDE_CODE)
    endpoint = Endpoint(gateway.url, KEY, model)
    done = run(CLAUDE_CODE, endpoint, "List the files with the shell.", tmp_path / "home")
    assert done.exit_code == 0, done.describe()
    assert "thinking-ok" in done.stdout, done.describe()
    requests = _tool_loop_requests(upstream, fragment)
    assert len(requests) >= 2, done.describe()
    second = requests[-1]
    if model == "think-compat":
        assistant = next(m for m in second["messages"] if m.get("tool_calls"))
        assert assistant["reasoning_content"] == THOUGHT
    else:
        model_turn = next(
            c
            for c in second["contents"]
            if c["role"] == "model" and any("functionCall" in p for p in c["parts"])
        )
        call = next(p for p in model_turn["parts"] if "functionCall" in p)
        assert call["thoughtSignature"] == SIGNATURE

"""The real Codex CLI, with a reasoning effort configured, through llmrelay to an Anthropic and
a Gemini provider that reason: the provider's thinking (an Anthropic thinking block and its
signature; a Gemini function call's thought signature) reaches Codex as a reasoning item with
encrypted_content, Codex keeps it in its history, and the next request of its tool loop
carries it back to the provider as the provider wrote it. The provider
(tests/support/reasoning_upstream.py) refuses a tool loop whose reasoning did not come back,
as the real APIs do, so the tool loop completes only if the round trip works (the scripted
agent upstream of the matrix gives no reasoning: this is where the round trip meets the real
client).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clients import CODEX, Endpoint, Invocation, need, run
from tests.support.gateway_process import GatewayProcess
from tests.support.reasoning_upstream import SIGNATURE, THOUGHT_SIGNATURE, ScriptedUpstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

KEY = "agent-codex-reasoning-key-0123456789"
SECRET = "sk-reasoning-upstream-secret"


def _with_effort(endpoint: Endpoint, prompt: str, home: Path, continued: bool) -> Invocation:
    """Codex as the matrix runs it, with `model_reasoning_effort` set (top-level keys of its
    config come before its tables)."""
    invocation = CODEX.invoke(endpoint, prompt, home, continued)
    config = invocation.files[".codex/config.toml"]
    files = {
        **invocation.files,
        ".codex/config.toml": 'model_reasoning_effort = "medium"\n' + config,
    }
    return Invocation(invocation.argv, invocation.env, files)


CODEX_THINKING = replace(CODEX, invoke=_with_effort)


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    root = upstream.root_url
    config = f"""
providers:
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
models:
  - {{name: think-claude, routes: [{{provider: claude, upstream_model: claude-think}}]}}
  - {{name: think-gemini, routes: [{{provider: google, upstream_model: gemini-think}}]}}
projects:
  - name: agents
    keys: [{{name: k, key: {KEY}}}]
"""
    process = GatewayProcess(tmp_path_factory.mktemp("gateway"), config=config)
    process.start(timeout_s=90)  # generous: other agent modules may be loading the machine
    yield process
    assert process.stop() == 0, process.logs()


@pytest.mark.parametrize(
    ("model", "path"), [("think-claude", "messages"), ("think-gemini", "gemini")]
)
def test_codex_carries_the_providers_reasoning_back(
    gateway: GatewayProcess, upstream: ScriptedUpstream, tmp_path: Path, model: str, path: str
) -> None:
    need(CODEX)
    endpoint = Endpoint(gateway.url, KEY, model)
    prompt = "Run the shell command `echo reasoning-ok` and tell me what it printed."
    done = run(CODEX_THINKING, endpoint, prompt, tmp_path / "home")
    assert done.exit_code == 0, done.describe()
    assert "reasoning-ok" in done.stdout, done.describe()
    bodies = [body for where, body in upstream.bodies if where == path]
    if path == "messages":
        first = next(b for b in bodies if b.get("thinking"))
        assert first["thinking"] == {"type": "enabled", "budget_tokens": 8192}
        looped = [b for b in bodies if b["messages"][-1]["role"] == "user" and _has_result(b)]
        assert looped, done.describe()
        assistant = [m for m in looped[-1]["messages"] if m["role"] == "assistant"][-1]
        assert assistant["content"][0]["type"] == "thinking"
        assert assistant["content"][0]["signature"] == SIGNATURE
    else:
        looped = [b for b in bodies if any(c["role"] == "model" for c in b["contents"])]
        assert looped, done.describe()
        model_turn = [c for c in looped[-1]["contents"] if c["role"] == "model"][-1]
        call = next(p for p in model_turn["parts"] if "functionCall" in p)
        assert call["thoughtSignature"] == THOUGHT_SIGNATURE


def _has_result(body: dict[str, Any]) -> bool:
    content = body["messages"][-1]["content"]
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )

"""Real coding agents and agent SDKs through a real `llmrelay serve` to a provider of each
type (the scripted agent upstream speaks them all), on two tasks each: a plain answer, and a
full tool loop (the agent's own shell tool runs `echo AGENT-<token>`, the result goes back, the
final answer quotes it). The table of cells, and which do not work yet, is tests/agents/matrix.py.

Each test checks what the client printed and what reached the provider: the provider's own
protocol paths, the tool call then the final answer, and the final answer streamed when the
client streams.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.cells import Cell, CellRunner
from tests.agents.matrix import cells
from tests.support.agent_clients import CLIENTS, Endpoint, need
from tests.support.agent_upstream import AgentRequest, AgentUpstream
from tests.support.gateway_process import GatewayProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

KEY = "agent-matrix-key-0123456789"
SECRET = "sk-agent-upstream-secret"
#: The upstream model each provider type's route names (the virtual model is agent-<type>).
UPSTREAM_MODELS = {"openai": "gpt-agent", "anthropic": "claude-agent", "gemini": "gemini-agent"}


def gateway_config(upstream: AgentUpstream) -> str:
    return f"""
providers:
  - {{slug: agent-openai, type: openai, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: agent-anthropic, type: anthropic, base_url: "{upstream.root_url}", api_key: {SECRET}}}
  - {{slug: agent-gemini, type: gemini, base_url: "{upstream.root_url}", api_key: {SECRET}}}
models:
  - name: agent-openai
    routes: [{{provider: agent-openai, upstream_model: {UPSTREAM_MODELS["openai"]}}}]
  - name: agent-anthropic
    routes: [{{provider: agent-anthropic, upstream_model: {UPSTREAM_MODELS["anthropic"]}}}]
  - name: agent-gemini
    routes: [{{provider: agent-gemini, upstream_model: {UPSTREAM_MODELS["gemini"]}}}]
projects:
  - name: agents
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def upstream() -> Iterator[AgentUpstream]:
    server = AgentUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(
    upstream: AgentUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("gateway")
    # A generous start: the agent clients of another module may be loading the machine.
    process = GatewayProcess(folder, config=gateway_config(upstream)).start(timeout_s=90)
    yield process
    assert process.stop() == 0, process.logs()


@pytest.fixture(scope="module")
def runner(
    request: pytest.FixtureRequest,
    upstream: AgentUpstream,
    gateway: GatewayProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CellRunner]:
    collected = []
    for item in request.session.items:
        params = getattr(item, "callspec", None)
        if isinstance(item, pytest.Function) and item.module is request.module and params:
            cell = Cell(params.params["client"], params.params["provider"], params.params["task"])
            if CLIENTS[cell.client].available():
                collected.append(cell)

    def endpoint(cell: Cell) -> Endpoint:
        return Endpoint(gateway.url, KEY, f"agent-{cell.provider}")

    runs = CellRunner(collected, endpoint, upstream, Path(tmp_path_factory.mktemp("agents")))
    yield runs
    runs.close()


def on_protocol(request: AgentRequest, provider: str) -> bool:
    if provider == "openai":
        return request.path in ("/v1/chat/completions", "/v1/responses")
    if provider == "anthropic":
        return request.path == "/v1/messages"
    return request.path.startswith(f"/v1beta/models/{UPSTREAM_MODELS['gemini']}:")


@pytest.mark.parametrize(("client", "provider", "task"), cells())
def test_agent(runner: CellRunner, client: str, provider: str, task: str) -> None:
    need(CLIENTS[client])
    done = runner.result(Cell(client, provider, task))
    assert done.run.exit_code == 0, done.describe()
    assert done.expected in done.run.stdout, done.describe()
    asked = done.model_requests()
    assert asked, done.describe()
    assert all(on_protocol(r, provider) for r in asked), done.describe()
    final = next((r for r in reversed(asked) if done.expected in r.answer), None)
    assert final is not None, done.describe()
    if task == "tool":
        calls = [r for r in asked if r.answer.startswith("call:")]
        assert calls, done.describe()
        assert asked.index(calls[0]) < asked.index(final), done.describe()
    if CLIENTS[client].streams:
        assert final.streamed, done.describe()

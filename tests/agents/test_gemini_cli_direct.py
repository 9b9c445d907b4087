"""Gemini CLI straight against the scripted agent upstream, with no gateway between them.

llmrelay has no Gemini-native inbound API yet (issue 29: its gemini-cli cells in
tests/agents/matrix.py are expected failures), so this proves the rest on its own: the harness
runs Gemini CLI, and the upstream's Gemini protocol carries its plain answer and its full tool
loop (run_shell_command, the functionResponse back, the final answer), streamed. Once /v1beta
exists the matrix covers Gemini CLI through the gateway and this stays as the baseline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.cells import Cell, run_cell
from tests.support.agent_clients import GEMINI_CLI, Endpoint, need
from tests.support.agent_upstream import AgentUpstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def upstream() -> Iterator[AgentUpstream]:
    server = AgentUpstream().start()
    yield server
    server.stop()


@pytest.mark.parametrize("task", ["plain", "tool"])
def test_gemini_cli_direct(upstream: AgentUpstream, tmp_path: Path, task: str) -> None:
    need(GEMINI_CLI)
    endpoint = Endpoint(upstream.root_url, "gemini-direct-key-0123456789", "gemini-agent")
    done = run_cell(Cell("gemini-cli", "direct", task), endpoint, upstream, tmp_path)
    assert done.run.exit_code == 0, done.describe()
    assert done.expected in done.run.stdout, done.describe()
    asked = done.model_requests()
    assert asked, done.describe()
    assert all(r.path.startswith("/v1beta/models/gemini-agent:") for r in asked), done.describe()
    assert all(r.headers.get("x-goog-api-key") == endpoint.key for r in asked), done.describe()
    final = asked[-1]
    assert done.expected in final.answer, done.describe()
    assert final.streamed and final.query.get("alt") == "sse", done.describe()
    if task == "tool":
        call = next(r for r in asked if r.answer.startswith("call:"))
        assert call.answer.startswith("call: run_shell_command "), done.describe()

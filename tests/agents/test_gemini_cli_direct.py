"""Gemini CLI straight against the scripted agent upstream, with no gateway between them.

The baseline of Gemini CLI's cells in tests/agents/matrix.py (which go through the gateway's
/v1beta API): the harness runs Gemini CLI, and the upstream's Gemini protocol carries its plain
answer, its full tool loop (run_shell_command, the functionResponse back, the final answer),
streamed, and a resumed session's second turn, with no gateway between them.
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


@pytest.mark.parametrize("task", ["plain", "tool", "multi"])
def test_gemini_cli_direct(upstream: AgentUpstream, tmp_path: Path, task: str) -> None:
    need(GEMINI_CLI)
    endpoint = Endpoint(upstream.root_url, "gemini-direct-key-0123456789", "gemini-agent")
    done = run_cell(Cell("gemini-cli", "direct", task), endpoint, upstream, tmp_path)
    for earlier, printed in done.earlier:
        assert earlier.exit_code == 0 and printed in earlier.stdout, done.describe()
    assert done.run.exit_code == 0, done.describe()
    assert done.expected in done.run.stdout, done.describe()
    asked = done.model_requests()
    assert asked, done.describe()
    assert all(r.path.startswith("/v1beta/models/gemini-agent:") for r in asked), done.describe()
    assert all(r.headers.get("x-goog-api-key") == endpoint.key for r in asked), done.describe()
    final = asked[-1]
    assert done.expected in final.answer, done.describe()
    assert final.streamed and final.query.get("alt") == "sse", done.describe()
    if task in ("tool", "multi"):
        call = next(r for r in asked if r.answer.startswith("call:"))
        assert call.answer.startswith("call: run_shell_command "), done.describe()

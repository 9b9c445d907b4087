"""The captured fixtures (tests/agents/captured/, written by tests/agents/capture.py) are what
the real clients sent: every one is there, scrubbed, and replaying its requests through the
scripted upstream's protocol readers gives the answers recorded, so the fixtures and the
readers agree (a client update that changes its requests shows up here, not only in the slow
matrix). No client runs."""

from __future__ import annotations

import json
import platform
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.agents.capture import CAPTURED, TOKEN
from tests.support.agent_clients import AGENTS_DIR, CLIENTS
from tests.support.agent_script import decide, summary
from tests.support.agent_upstream import conversation_of

FIXTURES = sorted(CAPTURED.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    captured: dict[str, Any] = json.loads(path.read_text())
    return captured


def test_every_client_and_task_is_captured() -> None:
    names = {path.stem for path in FIXTURES}
    assert names == {f"{client}-{task}" for client in CLIENTS for task in ("plain", "tool")}


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_fixture_replays_to_the_recorded_answers(path: Path) -> None:
    captured = load(path)
    assert captured["exit_code"] == 0
    expected = (
        f"REPLY-{TOKEN}" if captured["task"] == "plain" else f"The command printed AGENT-{TOKEN}."
    )
    assert expected in captured["final_output"]
    answered = 0
    for exchange in captured["exchanges"]:
        conversation = conversation_of(exchange["path"], exchange["body"])
        if conversation is None:
            continue
        answered += 1
        assert summary(decide(conversation)) == exchange["answer"], exchange["path"]
    assert answered > 0
    if captured["task"] == "tool":
        assert any(e["answer"].startswith("call:") for e in captured["exchanges"])


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_fixture_holds_nothing_of_the_machine_it_was_made_on(path: Path) -> None:
    text = path.read_text()
    host = socket.gethostname()
    for local in (str(AGENTS_DIR.parent.parent), "/tmp/capture-", host if len(host) > 5 else ""):
        assert not local or local not in text
    assert f"Linux {platform.release()}" not in text

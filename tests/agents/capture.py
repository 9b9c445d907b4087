"""What each real client sends, captured into fixtures (tests/agents/captured/CLIENT-TASK.json)
so that translators can be unit-tested on real agent traffic without running any client.

    .venv/bin/python -m tests.agents.capture [CLIENT ...]     (default: every installed client)

Each client runs directly against the scripted agent upstream (no gateway: the fixture is what
the client itself sends) on the two tasks with fixed tokens, and every request it made is
written with its method, path, query, headers and JSON body, and what the upstream answered.
Machine-specific text is scrubbed: the run's HOME and port, the host name, the kernel release.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from tests.agents.cells import prompt
from tests.support.agent_clients import AGENTS_DIR, CLIENTS, Client, Endpoint, run
from tests.support.agent_upstream import AgentUpstream

CAPTURED: Final = AGENTS_DIR / "captured"
#: Fixed tokens, so that a fixture changes only when the client's requests do.
TOKEN: Final = "captured"
KEY: Final = "sk-agent-capture-0123456789"
MODEL: Final = "agent-model"
HOME: Final = "/home/agent"
#: Headers that say nothing about the client (they differ run to run).
DROPPED_HEADERS: Final = frozenset({"content-length", "host", "connection"})


def version(client: Client) -> str:
    if client.needs.startswith("py:"):
        from importlib.metadata import version as installed

        return installed(
            {"agents": "openai-agents", "pydantic_ai": "pydantic-ai-slim"}[client.needs[3:]]
        )
    lock = json.loads((AGENTS_DIR / "package-lock.json").read_text())
    for path, entry in lock["packages"].items():
        if entry.get("bin") and client.needs in entry["bin"]:
            return f"{path.removeprefix('node_modules/')}@{entry['version']}"
    return "unknown"


def capture(client: Client, task: str) -> dict[str, Any]:
    upstream = AgentUpstream().start()
    try:
        with tempfile.TemporaryDirectory(prefix="capture-") as folder:
            home = Path(folder) / "home"
            text = prompt(task, TOKEN)
            done = run(client, Endpoint(upstream.root_url, KEY, MODEL), text, home)
            replacements = {
                str(AGENTS_DIR): "/opt/llmrelay/tests/agents",
                str(AGENTS_DIR.parent.parent): "/opt/llmrelay",
                str(home): HOME,
                folder: "/tmp/capture",
                f"{upstream.host}:{upstream.port}": "127.0.0.1:8080",
                **({socket.gethostname(): "agent-host"} if len(socket.gethostname()) > 5 else {}),
                platform.release(): "6.1.0-agent",
            }
            exchanges = [
                {
                    "method": r.method,
                    "path": r.path,
                    "query": r.query,
                    "headers": {
                        k: v for k, v in r.headers.items() if k.lower() not in DROPPED_HEADERS
                    },
                    "body": r.body,
                    "answer": r.answer,
                    "streamed": r.streamed,
                }
                for r in upstream.requests
            ]
            captured = {
                "client": client.name,
                "version": version(client),
                "protocol": client.protocol,
                "task": task,
                "prompt": text,
                "exit_code": done.exit_code,
                "final_output": done.stdout.strip()[-2000:],
                "exchanges": exchanges,
            }
            scrubbed: dict[str, Any] = scrub(captured, replacements)
            return scrubbed
    finally:
        upstream.stop()


def scrub(value: Any, replacements: dict[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in replacements.items():
            if old:
                value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [scrub(v, replacements) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v, replacements) for k, v in value.items()}
    return value


def main(names: list[str]) -> None:
    CAPTURED.mkdir(exist_ok=True)
    for name in names or [n for n, c in CLIENTS.items() if c.available()]:
        client = CLIENTS[name]
        for task in ("plain", "tool"):
            captured = capture(client, task)
            path = CAPTURED / f"{name}-{task}.json"
            path.write_text(json.dumps(captured, indent=1, ensure_ascii=False) + "\n")
            print(f"{path}: {len(captured['exchanges'])} requests, exit {captured['exit_code']}")


if __name__ == "__main__":
    main(sys.argv[1:])

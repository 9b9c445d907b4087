"""The client x provider-type result table of docs/agents.md, made from the agent matrix
(tests/agents/matrix.py) and checked against a run of it.

    .venv/bin/pytest -p no:xdist tests/agents/test_agents_matrix.py
    .venv/bin/python -m tests.agents.doc_table build/agent-matrix.json   # the run's outcomes

The run's outcomes (written by tests/agents/conftest.py) must agree with the matrix: every
cell outside `BROKEN` passed all its tasks, every cell in it failed them (strict xfails); a
cell that did neither, or was not run, stops the script with the list. Then the table between
the markers in docs/agents.md is written anew. Without a results file the table is written
from the matrix alone. tests/agents/test_doc_table.py fails when the committed table is not
the one the matrix defines, so a change to `BROKEN` comes with its table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

from tests.agents.matrix import BROKEN, NATIVE, PROVIDER_TYPES, TASKS
from tests.support.agent_clients import CLIENTS

DOC: Final = Path(__file__).resolve().parent.parent.parent / "docs" / "agents.md"
#: Where the matrix run writes its outcomes (tests/agents/conftest.py), unless
#: LLMRELAY_AGENT_MATRIX_RESULTS names another file.
RESULTS: Final = Path(__file__).resolve().parent.parent.parent / "build" / "agent-matrix.json"
START: Final = "<!-- agent-matrix:start (written by tests/agents/doc_table.py: do not edit) -->"
END: Final = "<!-- agent-matrix:end -->"
PROTOCOL_NAMES: Final = {
    "anthropic": "Anthropic Messages",
    "openai_responses": "OpenAI Responses",
    "openai_chat": "OpenAI Chat Completions",
    "gemini": "Gemini",
}


def cell_id(client: str, provider: str, task: str) -> str:
    """The matrix test's id of one cell and task (as pytest names it)."""
    return f"{client}-{provider}-{task}"


def expected(client: str, provider: str) -> str:
    """What a cell's tasks must all do in a run: "passed", or "xfailed" for a broken cell."""
    return "xfailed" if (client, provider) in BROKEN else "passed"


def disagreements(outcomes: dict[str, str]) -> list[str]:
    """The cells whose run did not do what the matrix says (or did not run)."""
    wrong = []
    for client in CLIENTS:
        for provider in PROVIDER_TYPES:
            for task in TASKS:
                name = cell_id(client, provider, task)
                got = outcomes.get(name, "not run")
                if got != expected(client, provider):
                    wrong.append(f"{name}: {got}, the matrix says {expected(client, provider)}")
    return wrong


def table() -> str:
    """The Markdown table, markers included."""
    header = "| client (protocol) | " + " | ".join(f"{p} provider" for p in PROVIDER_TYPES) + " |"
    lines = [START, header, "| --- |" + " --- |" * len(PROVIDER_TYPES)]
    for name, client in CLIENTS.items():
        cells = []
        for provider in PROVIDER_TYPES:
            reason = BROKEN.get((name, provider))
            if reason is not None:
                cells.append(f"fails: {reason}")
            elif NATIVE[client.protocol] == provider:
                cells.append("passes (pass-through)")
            else:
                cells.append("passes (translated)")
        protocol = PROTOCOL_NAMES[client.protocol]
        lines.append(f"| {name} ({protocol}) | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Every cell runs the tasks {', '.join(f'`{t}`' for t in TASKS)}; a cell passes")
    lines.append("when all of them do.")
    lines.append(END)
    return "\n".join(lines)


def written(doc: str) -> str:
    """`doc` with the table between its markers replaced by the matrix's."""
    start, end = doc.find(START), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC} has no {START!r} ... {END!r} markers")
    return doc[:start] + table() + doc[end + len(END) :]


def committed_table(doc: str) -> str:
    start, end = doc.find(START), doc.find(END)
    return doc[start : end + len(END)] if start >= 0 and end > start else ""


def load(path: Path) -> dict[str, str]:
    data: dict[str, Any] = json.loads(path.read_text())
    outcomes: dict[str, str] = data["cells"]
    return outcomes


def main(argv: list[str]) -> int:
    if argv:
        wrong = disagreements(load(Path(argv[0])))
        if wrong:
            print("the run disagrees with tests/agents/matrix.py:", *wrong, sep="\n  ")
            return 1
    DOC.write_text(written(DOC.read_text()))
    print(f"{DOC}: the table written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

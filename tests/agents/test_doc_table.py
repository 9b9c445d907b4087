"""docs/agents.md's result table is the one the agent matrix defines (tests/agents/doc_table.py
writes it), and a run that disagrees with the matrix is caught before it is written."""

from __future__ import annotations

from tests.agents.doc_table import (
    DOC,
    END,
    START,
    cell_id,
    committed_table,
    disagreements,
    expected,
    table,
    written,
)
from tests.agents.matrix import BROKEN, PROVIDER_TYPES, TASKS
from tests.support.agent_clients import CLIENTS


def test_the_committed_table_is_the_matrixs() -> None:
    assert committed_table(DOC.read_text()) == table(), (
        "docs/agents.md's table differs from tests/agents/matrix.py: "
        "run `.venv/bin/python -m tests.agents.doc_table` (after a matrix run, give it "
        "build/agent-matrix.json)"
    )


def test_the_table_names_every_client_and_the_reason_of_each_broken_cell() -> None:
    made = table()
    assert made.startswith(START) and made.endswith(END)
    for name in CLIENTS:
        assert f"| {name} (" in made
    for reason in BROKEN.values():
        assert f"fails: {reason}" in made


def test_a_run_that_agrees_has_no_disagreements_and_each_kind_of_miss_is_named() -> None:
    agreeing = {
        cell_id(c, p, t): expected(c, p) for c in CLIENTS for p in PROVIDER_TYPES for t in TASKS
    }
    assert disagreements(agreeing) == []
    some_client = next(iter(CLIENTS))
    run = dict(agreeing)
    run[cell_id(some_client, "openai", "plain")] = "failed"
    del run[cell_id(some_client, "gemini", "multi")]
    assert disagreements(run) == [
        f"{some_client}-openai-plain: failed, the matrix says {expected(some_client, 'openai')}",
        f"{some_client}-gemini-multi: not run, the matrix says {expected(some_client, 'gemini')}",
    ]


def test_writing_replaces_only_what_is_between_the_markers() -> None:
    doc = f"before\n{START}\nold table\n{END}\nafter\n"
    assert written(doc) == f"before\n{table()}\nafter\n"

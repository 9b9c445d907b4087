"""A pytest plugin (tests/conftest.py loads it): the agent matrix's outcomes, written for
docs/agents.md's table (tests/agents/doc_table.py). Each cell and task of
tests/agents/test_agents_matrix.py that ran, as passed, failed, xfailed or skipped, goes into
build/agent-matrix.json (or LLMRELAY_AGENT_MATRIX_RESULTS) at the end of a run that ran any.
Under xdist the controller, which sees every report, writes it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.agents.doc_table import RESULTS

_MATRIX_TEST = "test_agents_matrix.py::test_agent["
_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _MATRIX_TEST not in report.nodeid:
        return
    name = report.nodeid.split("[", 1)[1].rstrip("]")
    if hasattr(report, "wasxfail"):
        _OUTCOMES[name] = "xfailed" if report.skipped else "xpassed"
    elif (report.when == "call" or report.outcome != "passed") and _OUTCOMES.get(name) in (
        None,
        "passed",
    ):
        # A failure in setup or teardown counts too; a pass only from the call itself.
        _OUTCOMES[name] = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _OUTCOMES or hasattr(session.config, "workerinput"):
        return
    path = Path(os.environ.get("LLMRELAY_AGENT_MATRIX_RESULTS") or RESULTS)
    path.parent.mkdir(parents=True, exist_ok=True)
    finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.write_text(json.dumps({"finished": finished, "cells": _OUTCOMES}, indent=1) + "\n")

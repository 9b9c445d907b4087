"""Running the cells of the agent matrix (tests/agents/matrix.py): each cell is one real client
run on one task through one endpoint, with a fresh token so that its requests can be told
apart at the agent upstream from those of the cells running beside it.

The runs are slow (a node client takes seconds of CPU to start) and mostly independent, so a
module submits all the cells it collected at once to a few worker threads (each waits on its
client's process) and each test then waits for its own; every run has its own HOME, working
directory and token, and the agent upstream keeps no state between requests, so running
them side by side is safe.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from tests.support.agent_clients import CLIENTS, AgentRun, Endpoint, run
from tests.support.agent_upstream import AgentRequest, AgentUpstream

#: Clients run at once (each mostly waits: on its own start-up, the gateway, the upstream).
WORKERS: Final = 3
#: The longest a run may take (a client that hangs is killed and the cell fails).
RUN_TIMEOUT_S: Final = 150.0


@dataclass(frozen=True)
class Cell:
    client: str
    provider: str
    task: str

    @property
    def name(self) -> str:
        return f"{self.client}-{self.provider}-{self.task}"


@dataclass(frozen=True)
class CellRun:
    cell: Cell
    token: str
    run: AgentRun
    #: What reached the upstream for this run (the requests that carry its token).
    requests: list[AgentRequest]

    @property
    def expected(self) -> str:
        """What the final answer must say."""
        if self.cell.task == "plain":
            return f"REPLY-{self.token}"
        return f"The command printed AGENT-{self.token}."

    def model_requests(self) -> list[AgentRequest]:
        return [r for r in self.requests if r.answer.startswith(("text:", "call:"))]

    def describe(self) -> str:
        seen = "\n".join(
            f"  {r.method} {r.path} {'(stream) ' if r.streamed else ''}-> {r.answer[:120]}"
            for r in self.requests
        )
        return f"{self.cell.name} (token {self.token})\n{self.run.describe()}\n--- upstream\n{seen}"


def prompt(task: str, token: str) -> str:
    if task == "plain":
        return f"Answer with the word REPLY-{token} and nothing else."
    return f"Run the shell command `echo AGENT-{token}` and tell me what it printed."


def run_cell(cell: Cell, endpoint: Endpoint, upstream: AgentUpstream, folder: Path) -> CellRun:
    token = secrets.token_hex(5)
    client = CLIENTS[cell.client]
    done = run(client, endpoint, prompt(cell.task, token), folder / cell.name, RUN_TIMEOUT_S)
    mine = [r for r in list(upstream.requests) if token.encode() in orjson.dumps(r.body)]
    return CellRun(cell, token, done, mine)


class CellRunner:
    """All the cells of a module, run in the background as soon as the first is asked for."""

    def __init__(
        self,
        cells: list[Cell],
        endpoint: Callable[[Cell], Endpoint],
        upstream: AgentUpstream,
        folder: Path,
    ) -> None:
        self._cells = cells
        self._endpoint = endpoint
        self._upstream = upstream
        self._folder = folder
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[Cell, Future[CellRun]] = {}

    def result(self, cell: Cell) -> CellRun:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="agent-cell")
            for each in [cell, *(c for c in self._cells if c != cell)]:
                self._futures[each] = self._pool.submit(
                    run_cell, each, self._endpoint(each), self._upstream, self._folder
                )
        future = self._futures.get(cell)
        if future is None:  # not collected at the start (it is not in `cells`)
            return run_cell(cell, self._endpoint(cell), self._upstream, self._folder)
        return future.result()

    def close(self) -> None:
        if self._pool is not None:
            for future in self._futures.values():
                future.cancel()
            self._pool.shutdown(wait=True)

"""The agent matrix in one place: every client (in its own protocol) through llmrelay to a
provider of each type, for every task: `plain` (a plain answer), `tool` (a full tool loop) and
`multi` (the tool loop, then a second run of the client continuing the same conversation, whose
answer needs the first turn's tool result: tests/agents/cells.py). A cell that does not work
yet is listed in `BROKEN` with the reason; it runs as a strict expected failure, so the change
that fixes it must also remove it from `BROKEN` (an unexpected pass fails the run).

To add a client: give it a `Client` in tests/support/agent_clients.py and it is in every row.
To add a provider type: add it to `PROVIDER_TYPES` and a provider for it to the gateway config
in tests/agents/test_agents_matrix.py.
"""

from __future__ import annotations

from typing import Final

import pytest
from _pytest.mark import ParameterSet

from tests.support.agent_clients import CLIENTS

PROVIDER_TYPES: Final = ("openai", "anthropic", "gemini")
TASKS: Final = ("plain", "tool", "multi")
#: The provider type that speaks each client protocol (the pass-through cell).
NATIVE: Final = {
    "anthropic": "anthropic",
    "openai_chat": "openai",
    "openai_responses": "openai",
    "gemini": "gemini",
}

#: (client, provider type) -> why that cell fails today. Every task of the cell fails.
BROKEN: Final[dict[tuple[str, str], str]] = {}


def cells() -> list[ParameterSet]:
    """(client, provider type, task), one test each; the broken ones strictly expected to fail."""
    params = []
    for client in CLIENTS:
        for provider in PROVIDER_TYPES:
            reason = BROKEN.get((client, provider))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            for task in TASKS:
                params.append(
                    pytest.param(
                        client, provider, task, marks=marks, id=f"{client}-{provider}-{task}"
                    )
                )
    return params

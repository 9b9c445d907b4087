"""A provider that points back at the gateway itself: each hop keeps its own request id and
its own record. The outer request's id is the client's (CONTRACT: a client's X-Request-ID is
kept and echoed); the inner hop learns it from `x-llmrelay-client-request-id` and chooses its
own, so neither record overwrites the other (records are idempotent by request id)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-loop-key-0123456789"
CLIENT_ID = "loop-outer-1"


def config(upstream: MockUpstream) -> str:
    # `self` is declared by the operator (YAML), so loopback is allowed to it
    # (docs/security.md, Outbound addresses).
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}
  - {{slug: self, type: openai_compatible, base_url: "${{LOOP_SELF_URL}}", api_key: {KEY}}}
models:
  - name: inner
    routes: [{{provider: up, upstream_model: echo}}]
  - name: outer
    routes: [{{provider: self, upstream_model: inner}}]
projects:
  - name: loop
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    folder: Path = tmp_path_factory.mktemp("loop")
    process = GatewayProcess(folder, config=config(upstream))
    process.env["LOOP_SELF_URL"] = process.base_url  # its own port, known before it starts
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.logs()


def _records_of(gateway: GatewayProcess, count: int) -> dict[str, dict[str, Any]]:
    """virtual model -> its record, once `count` records are written (or after 30 s)."""
    path = gateway.database_url.removeprefix("sqlite:///")
    deadline = time.monotonic() + 30
    while True:
        with sqlite3.connect(path) as conn:
            conn.row_factory = sqlite3.Row
            rows = [dict(row) for row in conn.execute("SELECT * FROM request_records")]
        if len(rows) >= count or time.monotonic() > deadline:
            return {row["virtual_model"]: row for row in rows}
        time.sleep(0.1)


def test_a_request_through_the_gateway_twice_leaves_two_records_with_their_own_ids(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    answer = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": CLIENT_ID},
        json={"model": "outer", "messages": [{"role": "user", "content": "round trip"}]},
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-request-id"] == CLIENT_ID  # the client's id, echoed
    assert answer.json()["model"] == "outer"

    rows = _records_of(gateway, 2)
    assert len(rows) == 2, rows  # one record per hop: neither took the other's place
    outer, inner = rows["outer"], rows["inner"]
    assert outer["request_id"] == CLIENT_ID
    # The inner hop chose an id of its own, and told the real upstream under our header.
    inner_id = inner["request_id"]
    assert inner_id != CLIENT_ID and inner_id.startswith("req_")
    (sent,) = [
        r for r in upstream.chat_requests() if r.body["messages"][0]["content"] == "round trip"
    ]
    headers = {name.lower(): value for name, value in sent.headers.items()}
    assert headers["x-llmrelay-client-request-id"] == inner_id
    assert (outer["virtual_model"], outer["provider"], outer["status_code"]) == (
        "outer",
        "self",
        200,
    )
    assert (inner["virtual_model"], inner["provider"], inner["status_code"]) == ("inner", "up", 200)

"""The outbound address policy in a serving process: a provider a tenant declared at a
loopback address (saved while the operator allowed it, or before an upgrade) gets no
connection from the data plane (502 in the client protocol's shape, naming the rule), from
the provider test or from model discovery; the operator's provider at the same address is
reached. A real server on loopback counts the connections it gets."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.counting_server import ThreadedCountingServer
from tests.support.gateway_process import GatewayProcess
from tests.support.zygote import run_llmrelay

KEY = "e2e-outbound-key-0123456789"
ADMIN_TOKEN = "e2e-outbound-admin-token-0123456789"
RULE = "is a loopback address"


def config(server: ThreadedCountingServer) -> str:
    return f"""
providers:
  - {{slug: inward, type: openai_compatible, base_url: "{server.url()}"}}
  - {{slug: outward, type: openai_compatible, base_url: "{server.url()}"}}
models:
  - name: inward
    routes: [{{provider: inward, upstream_model: m}}]
  - name: outward
    routes: [{{provider: outward, upstream_model: m}}]
projects:
  - name: outbound
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedCountingServer]:
    found = ThreadedCountingServer().start()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def gateway(
    server: ThreadedCountingServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """A database where `inward` is a tenant's provider, before the process starts (no
    request may reach the server as the operator's first)."""
    folder: Path = tmp_path_factory.mktemp("outbound")
    process = GatewayProcess(folder, env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN})
    path = folder / "outbound.yaml"
    path.write_text(config(server))
    for command in (["migrate"], ["apply", str(path)]):
        run_llmrelay(
            command,
            env={**os.environ, **process.env},
            cwd=folder,
            check=True,
            timeout=120,
        )
    with sqlite3.connect(process.database_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE providers SET declared_by = 'tenant' WHERE slug = 'inward'")
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.logs()


def _post(gateway: GatewayProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}{path}",
        headers={"Authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"},
        json=body,
    )


def test_a_tenants_provider_at_loopback_gets_no_connection_from_anywhere(
    gateway: GatewayProcess, server: ThreadedCountingServer
) -> None:
    hi = [{"role": "user", "content": "hi"}]
    chat = _post(gateway, "/chat/completions", {"model": "inward", "messages": hi})
    assert chat.status_code == 502, chat.text
    error = chat.json()["error"]
    assert RULE in error["message"] and "outbound address policy" in error["message"]
    assert error["code"] == "address_refused"

    messages = _post(gateway, "/messages", {"model": "inward", "max_tokens": 5, "messages": hi})
    assert messages.status_code == 502, messages.text
    body = messages.json()
    assert body["type"] == "error" and RULE in body["error"]["message"]

    with httpx.Client(
        base_url=f"{gateway.url}/api/admin", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    ) as admin:
        (inward,) = [p for p in admin.get("/providers").json()["data"] if p["slug"] == "inward"]
        probed = admin.post(f"/providers/{inward['id']}/test")
        assert probed.status_code == 200, probed.text
        assert probed.json()["status"] == "unavailable" and RULE in probed.json()["detail"]

        queued = admin.post(f"/providers/{inward['id']}/discover")
        assert queued.status_code == 202, queued.text
        job = _finished(admin, queued.json()["job_id"])
        assert job["status"] == "failed" and RULE in (job["error"] or ""), job
    assert server.connections == 0

    # The operator's provider at the same address is reached (what it answers is no chat).
    _post(gateway, "/chat/completions", {"model": "outward", "messages": hi})
    assert server.connections >= 1


def _finished(admin: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        job: dict[str, Any] = admin.get(f"/jobs/{job_id}").json()
        if job["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return job
        time.sleep(0.1)

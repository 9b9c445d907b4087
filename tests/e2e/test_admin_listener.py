"""The separate admin listener: `serve --workers 2 --admin-listen HOST:PORT` serves the admin
API and /metrics on that second port only (404 on the data-plane port, which keeps the model
API), health on both; a change made on the admin port is served on the data-plane port;
SIGTERM stops both ports accepting and lets the requests in flight finish, exit 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.ports import free_port
from tests.support.replicas import within

KEY = "admin-listener-key-0123456789"
ADMIN = "admin-listener-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {ADMIN}"}


def _config(upstream: MockUpstream) -> str:
    return f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}]
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}
  - {{name: paced, routes: [{{provider: up, upstream_model: paced-200}}]}}
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""


@dataclass
class Listeners:
    gateway: GatewayProcess
    admin_port: int

    @property
    def data(self) -> str:
        return self.gateway.url

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"


def _serving(upstream: MockUpstream, folder: Path) -> Iterator[Listeners]:
    gateway = GatewayProcess(folder, config=_config(upstream), env={"LLMRELAY_ADMIN_TOKEN": ADMIN})
    admin_port = free_port()
    gateway.args += ["--workers", "2", "--admin-listen", f"127.0.0.1:{admin_port}"]
    gateway.start(timeout_s=60)  # two workers, each importing everything (spawn)
    try:
        yield Listeners(gateway, admin_port)
    finally:
        assert gateway.stop() == 0, gateway.logs()


@pytest.fixture(scope="module")
def listeners(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Listeners]:
    yield from _serving(upstream, tmp_path_factory.mktemp("admin-listener"))


@pytest.fixture
def stopped_listeners(upstream: MockUpstream, tmp_path: Path) -> Iterator[Listeners]:
    """A gateway of the test's own, for the test that stops it (the module's one serves the
    other tests, in whatever order they run)."""
    yield from _serving(upstream, tmp_path)


def _chat(base: str, key: str = KEY) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )


def test_the_data_plane_port_serves_the_model_api_and_health_but_no_admin_path(
    listeners: Listeners,
) -> None:
    assert _chat(listeners.data).status_code == 200
    for probe in ("/livez", "/readyz", "/healthz"):
        assert httpx.get(listeners.data + probe).status_code == 200
    for path in ("/api/admin/projects", "/api/admin/openapi.json", "/metrics"):
        refused = httpx.get(listeners.data + path, headers=BEARER)
        assert refused.status_code == 404, path
        assert refused.json()["error"]["code"] == "not_found"
    assert httpx.post(listeners.data + "/api/admin/projects", headers=BEARER).status_code == 404


def test_the_admin_port_serves_the_control_plane_metrics_and_health_but_no_model_call(
    listeners: Listeners,
) -> None:
    projects = httpx.get(listeners.admin + "/api/admin/projects", headers=BEARER)
    assert projects.status_code == 200 and projects.json()["data"][0]["name"] == "p"
    assert httpx.get(listeners.admin + "/api/admin/projects").status_code == 401
    assert "llmrelay_requests_total" in httpx.get(listeners.admin + "/metrics").text
    for probe in ("/livez", "/readyz", "/healthz"):
        assert httpx.get(listeners.admin + probe).status_code == 200
    assert _chat(listeners.admin).status_code == 404


def test_a_key_created_on_the_admin_port_is_served_on_the_data_plane_port(
    listeners: Listeners,
) -> None:
    project = httpx.get(listeners.admin + "/api/admin/projects", headers=BEARER).json()["data"][0]
    created = httpx.post(
        f"{listeners.admin}/api/admin/projects/{project['id']}/keys",
        headers=BEARER,
        json={"name": "made-on-admin-port"},
    )
    assert created.status_code == 201, created.text
    key = created.json()["key"]
    # Each of the two workers serves it (the other one learns of it by polling).
    within(30, lambda: all(_chat(listeners.data, key).status_code == 200 for _ in range(6)))


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except ConnectionRefusedError:
        return True


def test_sigterm_stops_both_listeners_and_drains_what_runs(stopped_listeners: Listeners) -> None:
    listeners = stopped_listeners
    gateway = listeners.gateway
    result: dict[str, bytes] = {}
    begun = threading.Event()

    def stream() -> None:
        with httpx.stream(
            "POST",
            f"{gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json={
                "model": "paced",
                "stream": True,
                # 40 words 0.2 s apart: still streaming while both listeners close
                "messages": [{"role": "user", "content": " ".join(f"w{i}" for i in range(40))}],
            },
            timeout=60,
        ) as answer:
            chunks = []
            for chunk in answer.iter_bytes():
                chunks.append(chunk)
                begun.set()
            result["body"] = b"".join(chunks)

    reader = threading.Thread(target=stream)
    reader.start()
    assert begun.wait(30)  # the stream is open: its first bytes came
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGTERM)
    within(30, lambda: _refused(gateway.port) and _refused(listeners.admin_port))
    assert reader.is_alive()  # refused while the stream still runs
    reader.join(60)
    assert result["body"].endswith(b"data: [DONE]\n\n")
    assert gateway.process.wait(30) == 0, gateway.logs()


def test_the_admin_listener_needs_its_own_port(tmp_path: Path) -> None:
    port = free_port()
    serve = [sys.executable, "-m", "llmrelay", "serve", "--port", str(port)]
    done = subprocess.run(
        [*serve, "--admin-listen", f"127.0.0.1:{port}"],
        env={**GatewayProcess(tmp_path).env},
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=30,
    )
    assert done.returncode == 2
    assert "needs a port other than --port" in done.stderr

"""The admin API against a running `llmrelay serve`: a provider, model, project and key
created over HTTP serve data-plane requests within seconds (the snapshot follows the config
generation), and a key revoked or a route disabled stops serving as quickly."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess

pytestmark = pytest.mark.e2e

ADMIN = "admin-token-for-resource-e2e-0123456789"
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path, env={"LLMRELAY_ADMIN_TOKEN": ADMIN}).start()
    yield process
    assert process.stop() == 0, process.logs()


def _eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> float:
    """Seconds until `check()` held; fails after `timeout_s`."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, "not within the time allowed"
        time.sleep(0.05)
    return time.monotonic() - started


def test_resources_created_over_http_serve_requests(gateway: GatewayProcess) -> None:
    admin = httpx.Client(
        base_url=f"{gateway.url}/api/admin", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    data = httpx.Client(base_url=gateway.base_url)
    with admin, data:
        assert admin.post("/providers", json={"slug": "mock", "type": "mock"}).status_code == 201
        model = admin.post(
            "/models",
            json={"name": "chat", "routes": [{"provider": "mock", "upstream_model": "mock-chat"}]},
        )
        assert model.status_code == 201, model.text
        project = admin.post("/projects", json={"name": "acme"}).json()
        key = admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"}).json()
        auth = {"Authorization": f"Bearer {key['key']}"}

        def served() -> bool:
            return data.post("/chat/completions", json=CHAT, headers=auth).status_code == 200

        assert _eventually(served) < 3.0

        route = model.json()["routes"][0]
        disabled = admin.patch(
            f"/models/{model.json()['id']}/routes/{route['id']}",
            json={"disabled": True},
            headers={"If-Match": f'"{route["version"]}"'},
        )
        assert disabled.status_code == 200, disabled.text
        _eventually(lambda: not served())
        assert data.post("/chat/completions", json=CHAT, headers=auth).status_code == 503

        revoked = admin.post(f"/keys/{key['id']}/revoke")
        assert revoked.json()["status"] == "revoked"

        def refused() -> bool:
            return data.post("/chat/completions", json=CHAT, headers=auth).status_code == 401

        assert _eventually(refused) < 3.0

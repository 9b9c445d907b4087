"""The console's place in the app: the data plane answers exactly as before with the
console mounted (its routes, its JSON 404 and 405), the console's answers carry the
security headers and its files their cache headers, nothing of it is imported at start-up,
and with LLMRELAY_CONSOLE=false it is gone."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from llmrelay.app import create_app
from llmrelay.settings import Settings
from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "console-mount-key-0123456789"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    upstream = MockUpstream().start()
    config = f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}
projects:
  - {{name: main, keys: [{{name: k, key: {KEY}}}]}}
"""
    yield from serving(tmp_path_factory.mktemp("mount"), config)
    upstream.stop()


def test_the_data_plane_is_unaffected(gateway: GatewayProcess, closing: Closing) -> None:
    client = closing(openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0))
    assert [m.id for m in client.models.list()] == ["chat"]
    reply = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "still here"}]
    )
    assert reply.choices[0].message.content == "still here"
    for method, path, status in (
        ("GET", "/v1/nothing", 404),
        ("GET", "/v1", 404),
        ("GET", "/v1/chat/completions", 405),
        ("POST", "/livez", 405),
    ):
        answer = httpx.request(method, gateway.url + path)
        assert answer.status_code == status, path
        assert answer.headers["content-type"] == "application/json"
        assert set(answer.json()) == {"error", "request_id"}
    unknown = httpx.get(gateway.url + "/api/admin/nothing")
    assert unknown.status_code == 404
    assert "error" in unknown.json()
    assert httpx.get(gateway.url + "/livez").status_code == 200
    assert "llmrelay_requests_total" in httpx.get(gateway.url + "/metrics").text


def test_console_answers_carry_the_security_headers(gateway: GatewayProcess) -> None:
    home = httpx.get(gateway.url + "/")
    assert home.status_code == 303
    assert home.headers["location"] == "/sign-in"
    page = httpx.get(gateway.url + "/sign-in")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "same-origin"
    assert page.headers["cache-control"] == "no-store"
    assert "<script>" not in page.text and " style=" not in page.text  # no inline code
    assert httpx.get(gateway.url + "/no-such-page").status_code == 404
    assert httpx.get(gateway.url + "/dashboard").headers["location"].startswith("/sign-in")


def test_static_files_are_served_by_the_app_with_cache_headers(gateway: GatewayProcess) -> None:
    page = httpx.get(gateway.url + "/sign-in").text
    css = re.search(r'href="(/static/console\.css\?v=\w+)"', page)
    assert css is not None
    versioned = httpx.get(gateway.url + css.group(1))
    assert versioned.status_code == 200
    assert versioned.headers["content-type"].startswith("text/css")
    assert "immutable" in versioned.headers["cache-control"]
    again = httpx.get(
        gateway.url + css.group(1), headers={"If-None-Match": versioned.headers["etag"]}
    )
    assert again.status_code == 304
    plain = httpx.get(gateway.url + "/static/console.css")
    assert "must-revalidate" in plain.headers["cache-control"]
    assert httpx.get(gateway.url + "/static/nothing.js").status_code == 404
    for name in ("theme.js", "live.js", "playground.js", "icon.svg"):
        assert httpx.get(f"{gateway.url}/static/{name}").status_code == 200


def test_nothing_of_the_console_is_imported_at_start_up() -> None:
    code = (
        "import sys; from llmrelay.app import create_app; from llmrelay.settings import Settings; "
        "create_app(Settings()); "
        "print(sorted(m for m in sys.modules if m.startswith(('llmrelay.console', 'jinja2'))))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert found.stdout.strip() == "[]"


def test_the_console_can_be_switched_off() -> None:
    """(Synchronous, as every test of this package: see conftest.browser.)"""
    client = TestClient(create_app(Settings(console=False)))  # no lifespan: routing only
    answer = client.get("/sign-in")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"

"""CORS on the admin API of a real `llmrelay serve`, and none on the data plane."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from llmrelay.admin.cors import with_cors
from llmrelay.settings import Settings
from tests.support.gateway_process import GatewayProcess, serving

pytestmark = pytest.mark.e2e

ALLOWED = "https://console.example.com"
OTHER = "https://evil.example.net"
ADMIN_TOKEN = secrets.token_urlsafe(32)
SUMMARY = "/api/admin/usage/summary?project=nobody"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from serving(
        tmp_path_factory.mktemp("cors"),
        "providers: []\n",
        env={
            "LLMRELAY_CORS_ORIGINS": f"{ALLOWED}, http://localhost:5173",
            "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
        },
    )


def _cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


def _preflight(gateway: GatewayProcess, path: str, origin: str, method: str) -> httpx.Response:
    return httpx.options(
        f"{gateway.url}{path}",
        headers={
            "origin": origin,
            "access-control-request-method": method,
            "access-control-request-headers": "authorization, if-match, x-csrf-token",
        },
    )


def test_a_preflight_from_a_listed_origin_is_allowed_with_credentials(
    gateway: GatewayProcess,
) -> None:
    response = _preflight(gateway, "/api/admin/usage/summary", ALLOWED, "PATCH")
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert response.headers["access-control-allow-credentials"] == "true"
    assert "PATCH" in response.headers["access-control-allow-methods"]
    assert "if-match" in response.headers["access-control-allow-headers"]
    assert "Origin" in response.headers["vary"]


def test_a_preflight_from_another_origin_gets_no_allow_origin(gateway: GatewayProcess) -> None:
    response = _preflight(gateway, "/api/admin/usage/summary", OTHER, "GET")
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers


def test_a_simple_request_from_a_listed_origin_gets_its_origin_back(
    gateway: GatewayProcess,
) -> None:
    response = httpx.get(
        f"{gateway.url}{SUMMARY}",
        headers={"origin": ALLOWED, "authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert "no project named" in response.text  # past authentication: the admin app works
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert response.headers["access-control-allow-credentials"] == "true"
    assert "x-request-id" in response.headers["access-control-expose-headers"].lower()
    assert "Origin" in response.headers["vary"]


def test_a_simple_request_from_another_origin_gets_no_allow_origin(
    gateway: GatewayProcess,
) -> None:
    response = httpx.get(f"{gateway.url}/api/admin/openapi.json", headers={"origin": OTHER})
    assert response.status_code == 200  # answered; the browser withholds it from the page
    assert "access-control-allow-origin" not in response.headers


def test_the_data_plane_never_answers_cors(gateway: GatewayProcess) -> None:
    preflight = _preflight(gateway, "/v1/chat/completions", ALLOWED, "POST")
    assert preflight.status_code == 405
    assert _cors_headers(preflight) == {}
    call = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"origin": ALLOWED, "authorization": "Bearer not-a-key-0123456789"},
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert call.status_code == 401
    assert _cors_headers(call) == {}
    assert "vary" not in call.headers
    models = httpx.get(f"{gateway.url}/v1/models", headers={"origin": ALLOWED})
    assert _cors_headers(models) == {}


def test_no_origins_configured_leaves_the_admin_app_unwrapped(tmp_path: Path) -> None:
    async def admin(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("not called")

    settings = Settings(database_url=f"sqlite:///{tmp_path}/gw.db")
    assert with_cors(admin, settings) is admin
    assert with_cors(admin, Settings(cors_origins=ALLOWED)) is not admin

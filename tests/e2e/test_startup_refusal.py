"""`llmrelay serve` with LLMRELAY_ENV=production refuses weak settings before it touches
the database or listens; development starts anyway and warns."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.ports import free_port
from tests.support.zygote import run_llmrelay

pytestmark = pytest.mark.e2e

GOOD_KEY = secrets.token_urlsafe(48)


@pytest.mark.parametrize(
    ("env", "variable", "problem"),
    [
        ({"LLMRELAY_SECRET_KEY": ""}, "LLMRELAY_SECRET_KEY", "is not set"),
        ({"LLMRELAY_SECRET_KEY": "changeme"}, "LLMRELAY_SECRET_KEY", "is too short"),
        (
            {"LLMRELAY_SECRET_KEY": "replace-me-with-a-real-secret-key-please"},
            "LLMRELAY_SECRET_KEY",
            "placeholder",
        ),
        ({"LLMRELAY_ADMIN_TOKEN": "admin-token-123"}, "LLMRELAY_ADMIN_TOKEN", "is too short"),
        (
            {"LLMRELAY_METRICS_TOKEN": "example-metrics-token-0123456789abcdef"},
            "LLMRELAY_METRICS_TOKEN",
            "placeholder",
        ),
        (
            {"LLMRELAY_BOOTSTRAP_ADMIN_PASSWORD": "Qx7!kd0-pl"},
            "LLMRELAY_BOOTSTRAP_ADMIN_PASSWORD",
            "at least 12",
        ),
        ({"LLMRELAY_CORS_ORIGINS": "*"}, "LLMRELAY_CORS_ORIGINS", "with credentials"),
    ],
)
def test_production_refuses_to_serve_naming_the_variable(
    tmp_path: Path, env: dict[str, str], variable: str, problem: str
) -> None:
    port = free_port()
    result = run_llmrelay(
        ["serve", "--port", str(port)],
        env={
            "PATH": os.environ.get("PATH", ""),
            "LLMRELAY_DATABASE_URL": f"sqlite:///{tmp_path}/gw.db",
            "LLMRELAY_ENV": "production",
            "LLMRELAY_SECRET_KEY": GOOD_KEY,
            **env,
        },
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    line = next(line for line in result.stderr.splitlines() if variable in line)
    assert problem in line, result.stderr
    for value in env.values():
        if value and value != "*":
            assert value not in result.stdout + result.stderr
    # refused before anything: no database file, no development key written
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_production_with_strong_settings_serves(tmp_path: Path) -> None:
    """The control for the test above: the same command with good values starts."""
    process = GatewayProcess(
        tmp_path,
        env={
            "LLMRELAY_ENV": "production",
            "LLMRELAY_SECRET_KEY": GOOD_KEY,
            "LLMRELAY_ADMIN_TOKEN": secrets.token_urlsafe(32),
            "LLMRELAY_BOOTSTRAP_ADMIN_PASSWORD": secrets.token_urlsafe(12),
            "LLMRELAY_CORS_ORIGINS": "https://console.example.com",
        },
    ).start()
    try:
        assert httpx.get(f"{process.url}/readyz").status_code == 200
    finally:
        assert process.stop() == 0
    assert "weak_setting" not in process.logs()


def test_development_serves_with_weak_values_and_warns_without_them(tmp_path: Path) -> None:
    weak_token = "dev-admin"
    process = GatewayProcess(
        tmp_path, env={"LLMRELAY_ENV": "development", "LLMRELAY_ADMIN_TOKEN": weak_token}
    ).start()
    try:
        assert httpx.get(f"{process.url}/readyz").status_code == 200
    finally:
        assert process.stop() == 0
    events = [json.loads(line) for line in process.logs().splitlines() if line.startswith("{")]
    warnings = [e for e in events if e["event"] == "weak_setting"]
    assert [(w["setting"], w["level"]) for w in warnings] == [("LLMRELAY_ADMIN_TOKEN", "warning")]
    assert weak_token not in process.logs()

"""The deployment files of deploy/, checked by the tools that read them, without a container
engine or a systemd to run them: the compose files rendered by Compose itself (`config`
needs no engine), the systemd units by `systemd-analyze verify`. (The image and the compose
stacks need an engine: deploy/smoke.sh builds and runs them with podman, docs/deployment.md
says what it checked.) The nginx configuration is run for real by
tests/e2e/test_replicas_nginx.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.services import REQUIRE_SERVICES, skipped_services

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SECRETS = {
    "LLMRELAY_SECRET_KEY": "compose-check-secret",
    "LLMRELAY_ADMIN_TOKEN": "compose-check-token",
    "POSTGRES_PASSWORD": "compose-check-password",
}


def _compose() -> list[str]:
    """`docker compose` (v2) when the plugin is there, else `docker-compose` (v1)."""
    docker = shutil.which("docker")
    if docker is not None:
        plugin = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if plugin.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is not None:
        return [legacy]
    if REQUIRE_SERVICES:
        pytest.fail("neither `docker compose` nor docker-compose is installed")
    skipped_services.add("docker compose or docker-compose (Debian package docker-compose)")
    pytest.skip("neither `docker compose` nor docker-compose is installed")


def _render(*files: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = _compose()
    for name in files:
        command += ["-f", str(DEPLOY / name)]
    return subprocess.run(
        [*command, "config"],
        env={"PATH": os.environ.get("PATH", ""), **(SECRETS if env is None else env)},
        capture_output=True,
        text=True,
        check=False,
        cwd=DEPLOY,
    )


def _services(*files: str) -> dict[str, dict[str, Any]]:
    done = _render(*files)
    assert done.returncode == 0, done.stderr
    services: dict[str, dict[str, Any]] = yaml.safe_load(done.stdout)["services"]
    return services


def test_the_single_process_compose_file_is_one_service_on_sqlite_with_a_volume() -> None:
    (service,) = _services("compose.single.yaml").values()
    environment = service["environment"]
    assert isinstance(environment, dict)
    assert environment["LLMRELAY_DATABASE_URL"].startswith("sqlite:////var/lib/llmrelay/")
    assert any(str(v).endswith(":/var/lib/llmrelay:rw") for v in service["volumes"])


def test_the_replicas_compose_file_migrates_once_before_the_replicas_behind_nginx() -> None:
    services = _services("compose.replicas.yaml")
    assert set(services) == {"postgres", "redis", "migrate", "llmrelay", "nginx"}
    assert services["migrate"]["command"] == ["migrate"]
    replicas = services["llmrelay"]
    # the mode written out (the spec's default) for tools that count replicas only with it
    assert replicas["deploy"] == {"mode": "replicated", "replicas": 2}
    assert replicas["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    environment = replicas["environment"]
    assert isinstance(environment, dict)
    assert environment["LLMRELAY_DATABASE_URL"].startswith("postgresql://")
    assert environment["LLMRELAY_REDIS_URL"] == "redis://redis:6379/0"
    assert "LLMRELAY_JOBS_IN_PROCESS" not in environment  # jobs in process (mode 2)
    assert any(
        "nginx.conf:/etc/nginx/conf.d/default.conf" in str(v) for v in services["nginx"]["volumes"]
    )


def test_the_workers_compose_file_moves_the_jobs_to_a_worker_service() -> None:
    services = _services("compose.replicas.yaml", "compose.workers.yaml")
    replica_env = services["llmrelay"]["environment"]
    assert isinstance(replica_env, dict)
    assert str(replica_env["LLMRELAY_JOBS_IN_PROCESS"]).lower() == "false"
    worker = services["worker"]
    assert worker["command"] == ["worker"]
    worker_env = worker["environment"]
    assert isinstance(worker_env, dict)
    assert worker_env["LLMRELAY_DATABASE_URL"] == replica_env["LLMRELAY_DATABASE_URL"]
    assert worker_env["LLMRELAY_SECRET_KEY"] == replica_env["LLMRELAY_SECRET_KEY"]


def test_a_compose_file_refuses_to_render_without_its_secrets() -> None:
    done = _render("compose.replicas.yaml", env={})
    assert done.returncode != 0
    assert "POSTGRES_PASSWORD" in done.stderr or "LLMRELAY_SECRET_KEY" in done.stderr


@pytest.mark.parametrize("unit", ["llmrelay.service", "llmrelay-worker.service"])
def test_the_systemd_unit_verifies_without_a_warning(unit: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if REQUIRE_SERVICES:
            pytest.fail("systemd-analyze is not installed")
        skipped_services.add("systemd-analyze (Debian package systemd)")
        pytest.skip("systemd-analyze is not installed")
    text = (DEPLOY / unit).read_text()
    assert "/opt/llmrelay/bin/llmrelay " in text
    # The unit as shipped, but for where llmrelay is installed here (verify checks it exists).
    installed = Path(sys.executable).parent / "llmrelay"
    (tmp_path / unit).write_text(text.replace("/opt/llmrelay/bin/llmrelay", str(installed)))
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / unit)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # unknown or misspelt settings only warn

"""What the `openai_codex` tests share: the stand-in ChatGPT (tests/support/mock_codex.py)
and a gateway on it, the `llmrelay codex` command driven line by line, and the admin API's
device code sign-in (the console's flow)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_codex import MockCodex

ADMIN = "e2e-codex-admin-token-0123456789"
#: Generous: a CLI process takes a minute or more to start on a loaded machine.
CEILING_S = 240.0


def codex_server(**options: Any) -> Iterator[MockCodex]:
    """A module fixture's body: the stand-in issuer and backend, stopped after."""
    server = MockCodex(**options).start()
    yield server
    server.stop()


def codex_gateway(codex: MockCodex, folder: Path, config: str) -> Iterator[GatewayProcess]:
    """A module fixture's body: a gateway on `config`, signing in at the stand-in issuer,
    with the admin token ADMIN; it must stop cleanly."""
    env = {"LLMRELAY_CODEX_ISSUER": codex.issuer, "LLMRELAY_ADMIN_TOKEN": ADMIN}
    yield from serving(folder, config, env)


def openai_client(gateway: GatewayProcess, key: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=key, base_url=gateway.base_url, max_retries=0, timeout=120) as c:
        yield c


def admin_client(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    headers = {"authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"{gateway.url}/api/admin", headers=headers, timeout=120) as c:
        yield c


def cli(gateway: GatewayProcess, *args: str) -> subprocess.Popen[str]:
    """`llmrelay codex ARGS` on the gateway's database, its output readable line by line."""
    return subprocess.Popen(
        [sys.executable, "-m", "llmrelay", "codex", *args],
        env={**gateway.env, "PYTHONUNBUFFERED": "1"},
        cwd=gateway.folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def line_matching(process: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    process.kill()
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(seen)}")


def finished(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=CEILING_S)
    assert process.returncode == 0, out
    return out


def until(check: Any, what: str) -> Any:
    """`check()` once it is truthy (the gateway reads a new config within a poll)."""
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {CEILING_S}s: {what}")


def provider_id(admin: httpx.Client) -> str:
    found: list[dict[str, Any]] = admin.get("/providers", params={"type": "openai_codex"}).json()[
        "data"
    ]
    return str(found[0]["id"])


def admin_sign_in(
    admin: httpx.Client, codex: MockCodex, resource: str | None = None
) -> dict[str, Any]:
    """The console's device code flow, through the admin API (onto `resource` when
    named): the account it signed in."""
    provider = provider_id(admin)
    started = admin.post(f"/providers/{provider}/codex/device")
    assert started.status_code == 200, started.text
    code = started.json()
    poll = {"device_auth_id": code["device_auth_id"], "user_code": code["user_code"]}
    if resource is not None:
        poll["resource"] = resource
    codex.approve(code["user_code"])
    done = admin.post(f"/providers/{provider}/codex/device/poll", json=poll)
    assert done.status_code == 200, done.text
    account: dict[str, Any] = done.json()["account"]
    return account

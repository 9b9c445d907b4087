"""Several `llmrelay serve` replicas on one database, and what the live-reload tests ask of
them: a chat status, `/readyz`, and waiting for a condition within a time limit."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.support.gateway_process import GatewayProcess
from tests.support.zygote import run_llmrelay


class Cluster:
    """Replicas on one database, and `llmrelay` commands run as a third process. Every
    replica polls the generation only once a minute, so a change seen within seconds came
    by the signal."""

    def __init__(
        self,
        folder: Path,
        database_url: str,
        redis_url: str | None,
        *,
        secret: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.folder = folder
        self.database_url = database_url
        self.secret = secret
        self.env = {"LLMRELAY_SNAPSHOT_POLL_S": "60", "LLMRELAY_SECRET_KEY": secret, **(env or {})}
        if redis_url is not None:
            self.env["LLMRELAY_REDIS_URL"] = redis_url
        self.replicas: list[GatewayProcess] = []

    def command(self, *args: str, secret: str | None = None) -> str:
        done = run_llmrelay(
            list(args),
            env={**self.replica_env(), "LLMRELAY_SECRET_KEY": secret or self.secret},
            cwd=self.folder,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def apply(self, text: str, *, secret: str | None = None) -> int:
        """Apply `text` from a process of its own; the config generation it committed."""
        path = self.folder / f"apply-{time.monotonic_ns()}.yaml"
        path.write_text(text)
        out = self.command("apply", str(path), secret=secret)
        return int(re.findall(r"config generation (\d+)", out)[-1])

    def replica_env(self) -> dict[str, str]:
        return {**os.environ, **self.env, "LLMRELAY_DATABASE_URL": self.database_url}

    def start(self, name: str, config: str | None = None) -> GatewayProcess:
        folder = self.folder / name
        folder.mkdir()
        replica = GatewayProcess(
            folder, config=config, env=self.env, database_url=self.database_url
        )
        self.replicas.append(replica.start())
        return replica

    def stop(self) -> None:
        for replica in self.replicas:
            assert replica.stop() == 0, replica.logs()


def chat(replica: GatewayProcess, key: str, model: str = "chat") -> int:
    return httpx.post(
        f"{replica.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    ).status_code


def ready(replica: GatewayProcess) -> dict[str, Any]:
    answer = httpx.get(f"{replica.url}/readyz", timeout=5)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def within(seconds: float, check: Callable[[], bool]) -> float:
    """Wait until `check()` holds; fail past `seconds`; return the time it took."""
    start = time.monotonic()
    while not check():
        elapsed = time.monotonic() - start
        assert elapsed < seconds, f"not within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - start

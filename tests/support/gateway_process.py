"""Starting `llmrelay serve` as a real process for end-to-end tests."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx

from tests.support.migrated import copy_migrated_sqlite
from tests.support.ports import free_port
from tests.support.zygote import ZygoteChild, popen_llmrelay


class GatewayProcess:
    """One `llmrelay serve` on a free port with its own database and log file."""

    def __init__(
        self,
        folder: Path,
        *,
        config: str | None = None,
        demo: bool = False,
        env: dict[str, str] | None = None,
        database_url: str | None = None,
        umask: int = -1,
    ) -> None:
        self.folder = folder
        #: Whether a new SQLite database starts migrated (see _premigrate): only the
        #: default one; a test that names its database watches `serve` make it.
        self.premigrate = database_url is None
        self.umask = umask  # the process's umask (-1: this one's)
        self.port = free_port()
        self.database_url = database_url or f"sqlite:///{folder / 'gateway.db'}"
        self.log_path = folder / f"gateway-{self.port}.log"
        self.args = [sys.executable, "-m", "llmrelay", "serve", "--port", str(self.port)]
        if config is not None:
            config_path = folder / f"config-{self.port}.yaml"
            config_path.write_text(config)
            self.args += ["--config", str(config_path)]
        if demo:
            self.args.append("--demo")
        self.env = {
            **os.environ,
            "LLMRELAY_DATABASE_URL": self.database_url,
            "LLMRELAY_SNAPSHOT_POLL_S": "0.5",
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | ZygoteChild | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def start(self, timeout_s: float = 180.0) -> GatewayProcess:
        self._premigrate()
        self._log = self.log_path.open("ab")  # a restart (after kill()) keeps what was logged
        self.process = popen_llmrelay(self.args, self.env, self.folder, self._log, self.umask)
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0) as client:  # one client for the whole poll
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    code = self.stop()
                    raise RuntimeError(f"gateway exited with {code}:\n{self.logs()}")
                try:
                    if client.get(f"{self.url}/readyz").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"gateway not ready within {timeout_s}s:\n{self.logs()}")

    def _premigrate(self) -> None:
        """A new SQLite database of ours starts as a copy of the worker's migrated template:
        the same schema `serve` would make (it finds it current and migrates nothing), for
        a few milliseconds instead of every migration on each start, hundreds of starts a
        run. Not when the test named its database, or set `premigrate = False`."""
        url = self.env["LLMRELAY_DATABASE_URL"]
        if not self.premigrate or url != self.database_url or not url.startswith("sqlite:///"):
            return
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            copy_migrated_sqlite(path)

    def records(self, ids: list[str], timeout_s: float = 5) -> dict[str, dict[str, Any]]:
        """request id -> its request_records row (SQLite), waiting up to `timeout_s` for
        all of them (records are written in batches, off the request path)."""
        path = self.database_url.removeprefix("sqlite:///")
        deadline = time.monotonic() + timeout_s
        marks = ",".join("?" * len(ids))
        while True:
            with sqlite3.connect(path) as conn:
                conn.row_factory = sqlite3.Row
                rows = conn.execute(
                    f"SELECT * FROM request_records WHERE request_id IN ({marks})", ids
                ).fetchall()
            found = {row["request_id"]: dict(row) for row in rows}
            if len(found) == len(ids) or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> int:
        """SIGKILL: a crash. Nothing is drained or flushed; the exit code (-9)."""
        assert self.process is not None, "not running"
        self.process.kill()
        code = self.process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, wait for a graceful exit; return the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code


def serving(
    folder: Path, config: str, env: dict[str, str] | None = None
) -> Iterator[GatewayProcess]:
    """A module fixture's body: a gateway on `config` for the module's tests, which must
    then shut down cleanly (SIGTERM, exit code 0)."""
    process = GatewayProcess(folder, config=config, env=env).start()
    yield process
    assert process.stop() == 0, process.logs()

"""Starting `llmrelay worker` as a real process for end-to-end tests: ready once it logged
`worker_started`; stopped gracefully (SIGTERM) or killed outright (SIGKILL, a crash)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from tests.support.zygote import ZygoteChild, popen_llmrelay


class WorkerProcess:
    def __init__(self, folder: Path, name: str, env: dict[str, str]) -> None:
        self.folder = folder
        self.log_path = folder / f"worker-{name}.log"
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | ZygoteChild | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> WorkerProcess:
        return self.launch().wait_started(timeout_s)

    def launch(self) -> WorkerProcess:
        """Start the process without waiting for it (start several at once, then wait)."""
        self._log = self.log_path.open("wb")
        self.process = popen_llmrelay(
            [sys.executable, "-m", "llmrelay", "worker"], self.env, self.folder, self._log
        )
        return self

    def wait_started(self, timeout_s: float = 60.0) -> WorkerProcess:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while "worker_started" not in self.logs():
            if self.process.poll() is not None or time.monotonic() > deadline:
                code = self.stop()
                raise RuntimeError(f"worker not started (exit {code}):\n{self.logs()}")
            time.sleep(0.05)
        return self

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the worker dies as in a crash, holding whatever it had claimed."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self._close()

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, wait for the graceful exit; its exit code."""
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
        self._close()
        return code

    def _close(self) -> None:
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

"""A PostgreSQL server of a test's own (the real binaries, a fresh data folder, a free port),
which the test may stop and start again: the shared one at 127.0.0.1:5432 must stay up for
the others."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.services import REQUIRE_SERVICES, skipped_services


def need_postgres_binaries() -> Path:
    """The newest `/usr/lib/postgresql/<version>/bin` that has initdb and pg_ctl."""
    found = [
        Path(folder)
        for folder in glob.glob("/usr/lib/postgresql/*/bin")
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists()
    ]
    if found:
        return max(found, key=lambda folder: int(folder.parent.name))
    if REQUIRE_SERVICES:
        pytest.fail(
            "PostgreSQL server binaries are not installed (LLMRELAY_TEST_REQUIRE_SERVICES=1)"
        )
    skipped_services.add("PostgreSQL server binaries (Debian package postgresql)")
    pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")


class PostgresServer:
    """`initdb` into a temporary folder, then `pg_ctl start`/`stop` on it as often as the
    test likes. As root the server runs as the `postgres` user (it refuses to run as root),
    so the folder lives under /tmp, which that user can reach, rather than in `tmp_path`."""

    def __init__(self, *, options: str = "") -> None:
        self.bin = need_postgres_binaries()
        #: More server settings (`-c name=value ...`), e.g. a higher max_connections.
        self.options = options
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="llmrelay-pg-"))
        self.data = self.folder / "data"
        self.sockets = self.folder / "sockets"
        self.log = self.folder / "server.log"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.sockets.mkdir()
        if self._as_user:
            for path in (self.folder, self.sockets):
                shutil.chown(path, "postgres", "postgres")
        self._run("initdb", "--auth=trust", "-U", "postgres", "--no-sync", "-D", str(self.data))
        self.running = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> PostgresServer:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.sockets} -c fsync=off"
        options = f"{options} {self.options}".strip()
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        self.running = True
        return self

    def stop(self) -> None:
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            self.running = False

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self._as_user, str(self.bin / program), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode != 0:
            output = f"{done.stdout}\n{done.stderr}\n{self.logs()}"
            raise RuntimeError(f"{program} failed ({done.returncode}):\n{output}")

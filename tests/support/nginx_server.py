"""nginx as the tests' load balancer: the real binary, run as the test's own child with its
files in a temporary folder, serving deploy/nginx.conf with loopback addresses filled in."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.services import REQUIRE_SERVICES, skipped_services

#: The configuration operators get, which the tests run as it is.
DEPLOYED_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"


def need_nginx() -> str:
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if binary is not None:
        return binary
    if REQUIRE_SERVICES:
        pytest.fail("nginx is not installed (LLMRELAY_TEST_REQUIRE_SERVICES=1)")
    skipped_services.add("nginx (Debian package nginx)")
    pytest.skip("nginx is not installed")


def deployed_conf(upstreams: list[int], port: int) -> str:
    """deploy/nginx.conf with the upstream's servers at these loopback ports, listening on
    `port`; nothing else changed."""
    text = DEPLOYED_CONF.read_text()
    servers = "\n".join(
        f"    server 127.0.0.1:{upstream} max_fails=1 fail_timeout=10s;" for upstream in upstreams
    )
    text, found = re.subn(r"^    server llmrelay:8080 [^\n]*;$", servers, text, flags=re.M)
    assert found == 1, "deploy/nginx.conf: the upstream's `server llmrelay:8080` line moved"
    text, found = re.subn(r"^    listen 8080;$", f"    listen 127.0.0.1:{port};", text, flags=re.M)
    assert found == 1, "deploy/nginx.conf: the `listen 8080;` line moved"
    return text


class NginxServer:
    """`nginx -p FOLDER` in the foreground: a main file of the test's own (pid, logs, temp
    folders in FOLDER) that includes the deployed http-level configuration."""

    def __init__(
        self, folder: Path, upstreams: list[int], *, worker_connections: int = 1024
    ) -> None:
        self.binary = need_nginx()
        #: Each request in flight takes two: the client's and the one to a replica.
        self.worker_connections = worker_connections
        self.folder = folder
        self.port = free_port()
        self.upstreams = upstreams
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> NginxServer:
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.folder / "temp" / name).mkdir(parents=True, exist_ok=True)
        (self.folder / "llmrelay.conf").write_text(deployed_conf(self.upstreams, self.port))
        temps = "\n".join(
            f"    {name}_temp_path {self.folder}/temp/{name};"
            for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        # As root, the workers would otherwise run as nobody, away from the temp folders.
        user = "user root;" if os.geteuid() == 0 else ""
        (self.folder / "nginx.conf").write_text(
            f"""{user}
daemon off;
worker_processes 1;
pid {self.folder}/nginx.pid;
error_log {self.folder}/error.log info;
events {{ worker_connections {self.worker_connections}; }}
http {{
    access_log {self.folder}/access.log;
{temps}
    include {self.folder}/llmrelay.conf;
}}
"""
        )
        command = [self.binary, "-p", str(self.folder), "-c", str(self.folder / "nginx.conf")]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stderr
        self.process = subprocess.Popen(
            [*command, "-e", str(self.folder / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not start:\n{self.logs()}") from None
                time.sleep(0.02)

    def logs(self) -> str:
        path = self.folder / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGQUIT)  # graceful: finish what is in flight
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

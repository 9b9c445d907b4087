"""A Redis server of a test's own (the real binary, on a free port), which the test may
stop and start again: the shared one at 127.0.0.1:6379 must stay up for the others."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from urllib.parse import quote

import pytest

from tests.support.ports import free_port
from tests.support.services import REQUIRE_SERVICES, skipped_services
from tests.support.tls import Certificates


def need_redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is not None:
        return binary
    if REQUIRE_SERVICES:
        pytest.fail("redis-server is not installed (LLMRELAY_TEST_REQUIRE_SERVICES=1)")
    skipped_services.add("redis-server binary (Debian package redis-server)")
    pytest.skip("redis-server is not installed")


class RedisServer:
    """With `tls`, it listens for TLS only (the certificates' CA file is `tls.ca_file`); with
    `password`, clients must AUTH: what managed Redis services ask for."""

    def __init__(self, *, tls: Certificates | None = None, password: str | None = None) -> None:
        self.binary = need_redis_binary()
        self.port = free_port()
        self.tls = tls
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password)}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca_file}"

    def start(self) -> RedisServer:
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        if self.password:
            options += ["--requirepass", self.password]
        listen = ["--port", str(self.port)]
        if self.tls is not None:
            listen = ["--port", "0", "--tls-port", str(self.port)]
            options += [
                "--tls-cert-file",
                str(self.tls.cert_file),
                "--tls-key-file",
                str(self.tls.key_file),
                "--tls-ca-cert-file",
                str(self.tls.ca_file),
                "--tls-auth-clients",
                "no",
            ]
        self.process = subprocess.Popen(
            [self.binary, *listen, *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

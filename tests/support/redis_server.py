"""A Redis server of a test's own (the real binary, on a free port), which the test may
stop and start again: the shared one at 127.0.0.1:6379 must stay up for the others."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from tests.support.ports import free_port
from tests.support.services import REQUIRE_SERVICES, skipped_services


def need_redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is not None:
        return binary
    if REQUIRE_SERVICES:
        pytest.fail("redis-server is not installed (LLMRELAY_TEST_REQUIRE_SERVICES=1)")
    skipped_services.add("redis-server binary (Debian package redis-server)")
    pytest.skip("redis-server is not installed")


class RedisServer:
    def __init__(self) -> None:
        self.binary = need_redis_binary()
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), *options],
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

"""Reaching the real PostgreSQL and Redis the tests use, and what to do when they are absent.

With LLMRELAY_TEST_REQUIRE_SERVICES=1 (set by .ci/run) a missing service fails the tests
that need it; without it they are skipped and the run ends with a loud notice.
"""

from __future__ import annotations

import os
import socket

POSTGRES_HOST = "127.0.0.1"
POSTGRES_PORT = 5432
POSTGRES_ADMIN_URL = f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/test"
REDIS_URL = "redis://127.0.0.1:6379/0"

REQUIRE_SERVICES = os.environ.get("LLMRELAY_TEST_REQUIRE_SERVICES") == "1"
#: With LLMRELAY_TEST_REQUIRE_BROWSER=1 (set by .ci/run) the console's browser tests fail when
#: Debian's Chromium or the playwright package is missing, instead of skipping.
REQUIRE_BROWSER = os.environ.get("LLMRELAY_TEST_REQUIRE_BROWSER") == "1"
CHROMIUM = "/usr/bin/chromium"
#: With LLMRELAY_TEST_REQUIRE_AGENTS=1 (set by .ci/run) the agent tests (tests/agents) fail when
#: a coding agent (`make agents`) or an agent SDK (the dev extra) is missing, instead of skipping.
REQUIRE_AGENTS = os.environ.get("LLMRELAY_TEST_REQUIRE_AGENTS") == "1"
skipped_services: set[str] = set()


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def postgres_available() -> bool:
    return reachable(POSTGRES_HOST, POSTGRES_PORT)


def chromium_available() -> bool:
    return os.access(CHROMIUM, os.X_OK)


def redis_available() -> bool:
    return reachable("127.0.0.1", 6379)

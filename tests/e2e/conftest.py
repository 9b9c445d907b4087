"""A mock upstream and a gateway process shared by the end-to-end tests of one module."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest

from tests.conftest import need_postgres
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.ports import free_port

KEY = "e2e-key-main-0123456789"
KEY_LIMITED = "e2e-key-limited-0123456789"
KEY_DISABLED = "e2e-key-disabled-0123456789"
KEY_EXPIRED = "e2e-key-expired-0123456789"
KEY_IP_BOUND = "e2e-key-ipbound-0123456789"
UPSTREAM_SECRET = "sk-upstream-secret-0001"
#: The `tight` provider's limits: the wait for an answer's head or first token, and the
#: longest silence in a stream.
TIGHT_TIMEOUT_S = 3
TIGHT_IDLE_S = 2
#: The `trickle` model's deadline for a whole answer.
TRICKLE_DEADLINE_S = 2


def gateway_config(upstream: MockUpstream) -> str:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    # `up` and `up2` keep the default limits (minutes): a healthy answer is never cut by a
    # loaded machine. Only the models that test a limit use `tight`, whose limits are short,
    # and their upstreams take far longer than those limits (a minute or forever), so the
    # tests can allow generous time and still tell a limit that fired from one that did not.
    return f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: {UPSTREAM_SECRET}
  - slug: up2
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: {UPSTREAM_SECRET}
  - slug: tight
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: {UPSTREAM_SECRET}
    timeout_s: {TIGHT_TIMEOUT_S}
    first_token_timeout_s: {TIGHT_TIMEOUT_S}
    stream_idle_timeout_s: {TIGHT_IDLE_S}
  - slug: dead
    type: openai_compatible
    base_url: {dead}
    connect_timeout_s: 1
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
  - name: chat-failover
    routes:
      - {{provider: dead, upstream_model: echo, priority: 0}}
      - {{provider: up, upstream_model: echo, priority: 1}}
  - name: pinned
    routes:
      - {{provider: up, upstream_model: echo}}
      - {{provider: up2, upstream_model: echo, priority: 1}}
  - name: rejects
    routes:
      - {{provider: up, upstream_model: status-400}}
      - {{provider: up2, upstream_model: echo-second, priority: 1}}
  - name: refused
    routes: [{{provider: up, upstream_model: status-401}}]
  - name: failing
    routes: [{{provider: up, upstream_model: status-500}}]
  - name: slow
    routes: [{{provider: tight, upstream_model: slow-60000}}]
  - name: slow-ok
    routes: [{{provider: up, upstream_model: slow-300}}]
  - name: drop
    routes: [{{provider: up, upstream_model: drop-after-2}}]
  - name: drop-early
    routes:
      - {{provider: up, upstream_model: drop-after-0}}
      - {{provider: up2, upstream_model: echo, priority: 1}}
  - name: stall
    routes: [{{provider: tight, upstream_model: stall-after-2}}]
  - name: stall-roomy
    routes: [{{provider: up, upstream_model: stall-after-3}}]
  - name: reset
    routes: [{{provider: up, upstream_model: reset-after-2}}]
  - name: reset-early
    routes:
      - {{provider: up, upstream_model: reset-after-0}}
      - {{provider: up2, upstream_model: echo, priority: 1}}
  - name: trickle
    deadline_s: {TRICKLE_DEADLINE_S}
    routes: [{{provider: up, upstream_model: trickle-300}}]
  - name: no-done
    routes: [{{provider: up, upstream_model: no-done}}]
  - name: malformed
    routes: [{{provider: up, upstream_model: malformed}}]
  - name: burst
    routes: [{{provider: up, upstream_model: burst}}]
  - name: redirect
    routes: [{{provider: up, upstream_model: redirect}}]
  - name: only-disabled
    routes: [{{provider: up, upstream_model: echo, disabled: true}}]
  - name: emb
    embedding: true
    routes: [{{provider: up, upstream_model: emb-upstream}}]
projects:
  - name: main
    keys:
      - {{name: k1, key: {KEY}}}
      - {{name: limited, key: {KEY_LIMITED}, models: [chat]}}
      - {{name: disabled, key: {KEY_DISABLED}, disabled: true}}
      - {{name: expired, key: {KEY_EXPIRED}, expires_at: 2020-01-01T00:00:00Z}}
      - {{name: ipbound, key: {KEY_IP_BOUND}, ip_allowlist: [10.0.0.0/8]}}
"""


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(
        tmp_path_factory.mktemp("gateway"),
        gateway_config(upstream),
        env={"LLMRELAY_MAX_BODY_BYTES": "65536"},
    )


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test (dropped after it)."""
    need_postgres()
    url = asyncio.run(create_postgres_database())
    try:
        yield url
    finally:
        asyncio.run(drop_postgres_database(url))


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=60) as made:
        yield made

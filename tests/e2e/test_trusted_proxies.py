"""X-Forwarded-For decides the client address only when the peer is a trusted proxy."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.conftest import KEY_IP_BOUND, gateway_config
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


def _call(process: GatewayProcess, forwarded_for: str) -> int:
    return httpx.post(
        f"{process.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY_IP_BOUND}", "X-Forwarded-For": forwarded_for},
        json=BODY,
    ).status_code


def test_forwarded_for_counts_only_behind_a_trusted_proxy(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    # The key may only be used from 10.0.0.0/8; the test client connects from 127.0.0.1.
    trusting = GatewayProcess(
        tmp_path, config=gateway_config(upstream), env={"LLMRELAY_TRUSTED_PROXIES": "127.0.0.1/32"}
    ).start()
    try:
        assert _call(trusting, "10.1.2.3") == 200
        assert _call(trusting, "192.0.2.7") == 403
        assert _call(trusting, "10.1.2.3, 192.0.2.7") == 403  # rightmost untrusted hop counts
    finally:
        assert trusting.stop() == 0

    untrusting = GatewayProcess(tmp_path, config=gateway_config(upstream)).start()
    try:
        assert _call(untrusting, "10.1.2.3") == 403  # a spoofed header from an untrusted peer
    finally:
        assert untrusting.stop() == 0

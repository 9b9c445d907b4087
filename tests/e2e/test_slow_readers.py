"""A client that reads its answer slowly, or stops reading it, against a real `llmrelay serve`
and a real mock upstream (issue 35, item 4): what waits to be written to the client is
bounded, the provider is then held back (it cannot write its answer on), and a client that
leaves the buffer full for LLMRELAY_SLOW_READER_TIMEOUT_S is cut, its request recorded (499,
`client_too_slow`) and the provider's connection released. A client that keeps up is never
cut, however large the answer.

The upstream's answer (`flood-N`) is N MiB written as fast as the gateway takes it; the raw
client sets a small receive buffer so the kernel holds little of it on the client's side.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.billing import eventually
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

pytestmark = pytest.mark.e2e

KEY = "e2e-slow-readers-key-0123456789"
SLOW_READER_TIMEOUT_S = 3.0
WRITE_BUFFER_BYTES = 64 * 1024
#: Generous: the alternative to a cut is none (the stream would be held for ever).
CEILING_S = 60.0
MIB = 1024 * 1024


def _config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}
models:
  - name: flooded
    routes: [{{provider: up, upstream_model: flood-256}}]
  - name: flooded-small
    routes: [{{provider: up, upstream_model: flood-8}}]
projects:
  - name: slow
    keys:
      - {{name: k, key: {KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {
        "LLMRELAY_SLOW_READER_TIMEOUT_S": str(SLOW_READER_TIMEOUT_S),
        "LLMRELAY_CLIENT_WRITE_BUFFER_BYTES": str(WRITE_BUFFER_BYTES),
    }
    yield from serving(tmp_path_factory.mktemp("slow-readers"), _config(upstream), env)


def _request(model: str, request_id: str) -> bytes:
    body = json.dumps(
        {"model": model, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\n"
        "Host: gateway\r\n"
        f"Authorization: Bearer {KEY}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"X-Request-ID: {request_id}\r\n\r\n"
    )
    return head.encode() + body


def _drain(sock: socket.socket) -> None:
    """Read until the gateway's close (an orderly end or a reset)."""
    sock.settimeout(CEILING_S)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        pass


def test_a_client_that_stops_reading_is_cut_after_the_limit_and_its_request_recorded(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    request_id = "slow-reader-stops"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.settimeout(CEILING_S)
        sock.connect(("127.0.0.1", gateway.port))
        sock.sendall(_request("flooded", request_id))
        got = b""
        while b"\r\n\r\n" not in got:
            got += sock.recv(4096)
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        stopped = time.monotonic()  # from here on the client reads nothing

        # The gateway lets go of the provider once it has cut the client.
        eventually(lambda: "flood-256" in upstream.abandoned, CEILING_S, "the upstream released")
        held = time.monotonic() - stopped
        assert held >= SLOW_READER_TIMEOUT_S, held
        # Back-pressure: the provider could write only what the buffers on the way hold
        # (the gateway's bounded one, the sockets'), far from its 256 MiB.
        assert upstream.flooded["flood-256"] < 64 * MIB, upstream.flooded
        _drain(sock)

    record = gateway.records([request_id], timeout_s=CEILING_S)[request_id]
    assert (record["status_code"], record["error_code"]) == (499, "client_too_slow")
    assert record["completion_tokens"] > 0  # what was handed to the client, estimated
    assert "slow_reader_cut" in gateway.logs()


def test_a_client_that_keeps_up_gets_a_large_answer_whole(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    request_id = "slow-reader-keeps-up"
    received = 0
    tail = b""
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": request_id},
        json={
            "model": "flooded-small",
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        },
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            received += len(chunk)
            tail = (tail + chunk)[-64:]
    assert received > 7 * MIB  # the provider's 8 MiB, each event naming the virtual model
    assert tail.endswith(b"data: [DONE]\n\n")
    assert upstream.flooded["flood-8"] >= 8 * MIB
    record = gateway.records([request_id], timeout_s=CEILING_S)[request_id]
    assert record["status_code"] == 200 and record["error_code"] is None

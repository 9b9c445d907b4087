"""Slow and oversized clients against a real `llmrelay serve`, over raw sockets: a head that
never ends or trickles in is cut after LLMRELAY_HEADER_TIMEOUT_S, a body that trickles in
after LLMRELAY_BODY_TIMEOUT_S (with a 408 in the route's protocol, no provider call, no
usage), a head over LLMRELAY_MAX_HEADER_BYTES gets 431, and hundreds of slow connections do
not hold up a normal request. The gateway runs with one-second limits so this stays quick."""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "slow-clients-key-0123456789"
PROVIDER_KEY = "sk-slow-clients-provider-0001"
HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_HEADER_BYTES = 16 * 1024
#: What a loaded two-core machine may add to a limit before the cut is seen. Generous: the
#: alternative to a cut is none (the tests' slow requests would take far longer, or forever).
SLACK_S = 8.0
#: The head limit of the gateway in test_hundreds_of_slow_connections_..., long enough that a
#: normal request served in well under it cannot have waited for the slow ones to be cut.
LONG_HEADER_TIMEOUT_S = 6.0


def _config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: {PROVIDER_KEY}
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
projects:
  - name: main
    keys:
      - {{name: k1, key: {KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(
        tmp_path_factory.mktemp("slow-clients"),
        _config(upstream),
        env={
            "LLMRELAY_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
            "LLMRELAY_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
            "LLMRELAY_MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        },
    )


def _connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=10)


def _read_until_closed(sock: socket.socket, timeout_s: float = 10) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout_s)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _trickle_until_closed(sock: socket.socket, data: bytes, every_s: float) -> tuple[bytes, int]:
    """Send `data` a byte at a time until the server answers or closes: what it sent (the
    whole answer, to the close) and how many bytes of `data` went out."""
    sent = 0
    for byte in data:
        readable, _, _ = select.select([sock], [], [], every_s)
        if readable:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        sent += 1
    else:
        pytest.fail("the server read the whole slow request without cutting it")
    try:
        return _read_until_closed(sock), sent
    except ConnectionResetError:
        return b"", sent


def _exchange(sock: socket.socket, request: bytes) -> int:
    """Send a whole request on a kept-alive connection; the status of its whole answer."""
    sock.sendall(request)
    response = http.client.HTTPResponse(sock)
    response.begin()
    response.read()
    return response.status


def _head(path: str, length: int, auth: str = KEY) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {auth}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _split(answer: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines)}
    return status, headers, body


def test_a_connection_that_sends_nothing_is_closed(gateway: GatewayProcess) -> None:
    started = time.monotonic()
    with _connect(gateway) as sock:
        assert _read_until_closed(sock) == b""
    assert HEADER_TIMEOUT_S * 0.9 <= time.monotonic() - started < HEADER_TIMEOUT_S + SLACK_S


def test_a_head_sent_byte_by_byte_is_cut_with_408(gateway: GatewayProcess) -> None:
    head = b"GET /livez HTTP/1.1\r\nHost: gw\r\nX-Padding: " + b"p" * 200 + b"\r\n\r\n"
    started = time.monotonic()
    with _connect(gateway) as sock:
        answer, sent = _trickle_until_closed(sock, head, every_s=0.05)
    elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert sent < len(head)
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed < HEADER_TIMEOUT_S + SLACK_S


def test_a_kept_alive_connection_is_not_cut_while_idle_but_its_next_head_is_timed(
    gateway: GatewayProcess,
) -> None:
    request = b"GET /livez HTTP/1.1\r\nHost: gw\r\n\r\n"
    with _connect(gateway) as sock:
        assert _exchange(sock, request) == 200
        time.sleep(HEADER_TIMEOUT_S * 1.5)  # idle between requests: the keep-alive timeout's
        assert _exchange(sock, request) == 200
        sock.sendall(b"GET /livez HTTP/1.1\r\nHo")  # and then nothing more
        started = time.monotonic()
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert time.monotonic() - started < HEADER_TIMEOUT_S + SLACK_S


def test_stray_line_ends_do_not_keep_a_connection_open(gateway: GatewayProcess) -> None:
    """Bytes that begin no request (llhttp skips empty lines) still start the clock."""
    started = time.monotonic()
    with _connect(gateway) as sock:
        for _ in range(int(HEADER_TIMEOUT_S * 10) + 20):
            try:
                sock.sendall(b"\r\n")
            except OSError:
                break
            readable, _, _ = select.select([sock], [], [], 0.1)
            if readable:
                break
        try:
            answer = _read_until_closed(sock)
        except ConnectionResetError:  # closed with our last line ends unread: an RST
            answer = b""
        assert answer == b""
    assert time.monotonic() - started < HEADER_TIMEOUT_S + SLACK_S


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "chat", "messages": [{"role": "user", "content": "x"}]}),
        (
            "/v1/messages",
            {"model": "chat", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        ),
    ],
)
def test_a_trickled_body_gets_408_in_the_routes_protocol_and_no_provider_call(
    gateway: GatewayProcess, upstream: MockUpstream, path: str, body: dict[str, object]
) -> None:
    payload = json.dumps(body).encode() + b" " * 200
    calls = len(upstream.requests)
    started = time.monotonic()
    with _connect(gateway) as sock:
        sock.sendall(_head(path, len(payload)))
        answer, sent = _trickle_until_closed(sock, payload, every_s=0.05)
    elapsed = time.monotonic() - started
    status, headers, raw = _split(answer)
    assert status.startswith("HTTP/1.1 408 "), answer
    assert headers["connection"] == "close"
    assert sent < len(payload)
    assert BODY_TIMEOUT_S * 0.9 <= elapsed < BODY_TIMEOUT_S + SLACK_S
    error = json.loads(raw)
    request_id = headers["x-request-id"]
    assert error["request_id"] == request_id
    if path == "/v1/messages":
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        assert "did not arrive within 1 seconds" in error["error"]["message"]
    else:
        assert error["error"]["code"] == "request_timeout"
        assert error["error"]["type"] == "invalid_request_error"
    assert len(upstream.requests) == calls  # nothing reached the provider
    record = gateway.records([request_id])[request_id]
    assert record["status_code"] == 408
    assert record["error_code"] == "request_timeout"
    assert record["provider"] is None
    assert not record["input_tokens"] and not record["output_tokens"]
    assert not record["cost_micros"]


def test_a_body_nobody_reads_does_not_keep_the_connection(gateway: GatewayProcess) -> None:
    """A wrong key is answered 401 before the body is read; the body never comes, and the
    connection is closed all the same (the protocol's backstop, a second after the limit)."""
    with _connect(gateway) as sock:
        sock.sendall(_head("/v1/chat/completions", 100, auth="wrong-key-0123456789abcdef"))
        started = time.monotonic()
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert time.monotonic() - started < BODY_TIMEOUT_S + 1 + SLACK_S


def test_a_trickled_body_on_a_control_plane_route_is_cut(gateway: GatewayProcess) -> None:
    """Routes outside the data plane (here the admin API's sign-in) have the backstop. The
    body is long enough that trickling all of it takes longer than the time allowed for the
    cut (at 0.1 s a byte): the assertion on the time decides, not the length (with 40 bytes
    of password, a cut more than 4 s late on a loaded machine would let the whole body through
    and fail the test before the bound on time could decide)."""
    password = "x" * int((BODY_TIMEOUT_S + 1 + SLACK_S) / 0.1)
    payload = json.dumps({"email": "a@example.com", "password": password}).encode()
    head = (
        f"POST /api/admin/auth/login HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    with _connect(gateway) as sock:
        sock.sendall(head)
        answer, sent = _trickle_until_closed(sock, payload, every_s=0.1)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert sent < len(payload)
    assert time.monotonic() - started < BODY_TIMEOUT_S + 1 + SLACK_S


def test_an_oversized_header_gets_431_and_the_server_stays_healthy(
    gateway: GatewayProcess,
) -> None:
    head = b"GET /livez HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n"
    with _connect(gateway) as sock:
        with suppress(OSError):  # closed while we were still sending: answered below
            sock.sendall(head)
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer
    assert b"connection: close" in answer
    assert httpx.get(f"{gateway.url}/livez").status_code == 200


def test_a_head_that_keeps_growing_is_cut_before_it_ends(gateway: GatewayProcess) -> None:
    """No end of head in sight: the head's size alone gets the 431, without waiting for the
    header timeout (and without buffering the rest)."""
    with _connect(gateway) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"b" * (4 * MAX_HEADER_BYTES))
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer  # the header timeout's would be a 408


def test_many_headers_adding_up_past_the_limit_get_431(gateway: GatewayProcess) -> None:
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(400))
    with _connect(gateway) as sock:
        with suppress(OSError):
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: gw\r\n" + headers + b"\r\n")
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer


def test_hundreds_of_slow_connections_do_not_hold_up_a_normal_request(
    upstream: MockUpstream, tmp_path: Path
) -> None:
    env = {"LLMRELAY_HEADER_TIMEOUT_S": str(LONG_HEADER_TIMEOUT_S)}
    gateway = GatewayProcess(tmp_path, config=_config(upstream), env=env).start()
    with ExitStack() as stack:
        stack.callback(lambda: gateway.stop())
        slow = [stack.enter_context(_connect(gateway)) for _ in range(200)]
        for i, sock in enumerate(slow):
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"[: 10 + i % 30])
        started = time.monotonic()
        response = httpx.post(
            f"{gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json={"model": "chat", "messages": [{"role": "user", "content": "still here"}]},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < LONG_HEADER_TIMEOUT_S / 2
        # and every slow connection is gone once its head timed out
        deadline = started + LONG_HEADER_TIMEOUT_S + SLACK_S
        for sock in slow:
            answer = _read_until_closed(sock, max(0.1, deadline - time.monotonic()))
            assert answer.startswith(b"HTTP/1.1 408 "), answer


def test_a_body_larger_than_the_head_cap_sent_with_its_head_is_served(
    gateway: GatewayProcess,
) -> None:
    """The head cap counts the head, not the bytes of one read: a small head and a body of
    four times the cap, in one write, are a normal request."""
    text = "w" * (4 * MAX_HEADER_BYTES)
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": text}]})
    with _connect(gateway) as sock:
        status = _exchange(sock, _head("/v1/chat/completions", len(body)) + body.encode())
    assert status == 200

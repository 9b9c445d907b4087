"""Header injection against a real `llmrelay serve`, over raw sockets: a request header with a
line break or NUL in its value is refused by the parser (400) and reaches no provider; what
the gateway reflects into its response headers (the request id) cannot add a header or split
the response; and the client's own headers (credentials, cookies, forwarding headers) never
reach a provider, which sees only the gateway's credentials."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "injection-client-key-0123456789"
OPENAI_PROVIDER_KEY = "sk-injection-openai-provider-0001"
ANTHROPIC_PROVIDER_KEY = "sk-ant-injection-provider-0002"
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: {OPENAI_PROVIDER_KEY}
  - slug: ant
    type: anthropic
    base_url: {upstream.root_url}
    api_key: {ANTHROPIC_PROVIDER_KEY}
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
  - name: claude
    routes: [{{provider: ant, upstream_model: echo}}]
projects:
  - name: main
    keys:
      - {{name: k1, key: {KEY}}}
"""
    yield from serving(tmp_path_factory.mktemp("header-injection"), config)


def _exchange(gateway: GatewayProcess, request: bytes) -> bytes:
    """Send one raw request (closing the connection after it); the whole raw answer."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _post(path: str, body: bytes, *headers: bytes) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1".encode(),
        b"Host: gw",
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        b"Connection: close",
        *headers,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _head_lines(answer: bytes) -> list[bytes]:
    head, separator, _ = answer.partition(b"\r\n\r\n")
    assert separator, answer
    return head.split(b"\r\n")


def _header_values(answer: bytes, name: bytes) -> list[bytes]:
    return [
        line.split(b":", 1)[1].strip()
        for line in _head_lines(answer)[1:]
        if line.split(b":", 1)[0].lower() == name
    ]


@pytest.mark.parametrize(
    "header",
    [
        b"X-Custom: a\rInjected: 1",
        b"X-Custom: a\nInjected: 1",
        b"X-Custom: a\x00b",
        b"X-Request-Id: abc\nSet-Cookie: s=1",
        b"X-Request-Id: abc\x00",
        b"Authorization: Bearer " + KEY.encode() + b"\rX-Injected: 1",
        b"Anthropic-Version: 2023-06-01\nX-Injected: 1",
        b"X-Custom: a\r\n folded",  # obsolete line folding
    ],
)
def test_a_control_character_in_a_header_value_is_refused_before_any_provider_call(
    gateway: GatewayProcess, upstream: MockUpstream, header: bytes
) -> None:
    calls = len(upstream.requests)
    answer = _exchange(
        gateway,
        _post(
            "/v1/chat/completions",
            json.dumps(CHAT).encode(),
            b"Authorization: Bearer " + KEY.encode(),
            header,
        ),
    )
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"injected" not in answer.lower()
    assert len(upstream.requests) == calls


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (b"client-id_42", True),
        (b"abc Set-Cookie: s=1", False),  # spaces are legal in a value, not in an id
        (b"abc;\tx-injected=1", False),
        (b"%0d%0aX-Injected:%201", False),
        (b"\xc3\xa9t\xc3\xa9", False),
        (b"x" * 65, False),
    ],
)
def test_the_reflected_request_id_cannot_add_a_header(
    gateway: GatewayProcess, given: bytes, kept: bool
) -> None:
    for request in (
        _post(
            "/v1/chat/completions",
            json.dumps(CHAT).encode(),
            b"Authorization: Bearer " + KEY.encode(),
            b"X-Request-Id: " + given,
        ),
        b"GET /livez HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nX-Request-Id: "
        + given
        + b"\r\n\r\n",
    ):
        answer = _exchange(gateway, request)
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        ids = _header_values(answer, b"x-request-id")
        assert len(ids) == 1
        assert (ids[0] == given) is kept, ids
        names = {line.split(b":", 1)[0].lower() for line in _head_lines(answer)[1:]}
        assert not names & {b"set-cookie", b"x-injected"}


def test_a_hostile_model_name_is_not_reflected_into_a_header(gateway: GatewayProcess) -> None:
    body = json.dumps({**CHAT, "model": "chat\r\nX-Injected: 1"}).encode()
    answer = _exchange(
        gateway, _post("/v1/chat/completions", body, b"Authorization: Bearer " + KEY.encode())
    )
    assert answer.startswith(b"HTTP/1.1 404 "), answer
    assert all(not line.lower().startswith(b"x-injected") for line in _head_lines(answer))
    assert _header_values(answer, b"x-llmrelay-model") == []


CLIENT_ONLY = (
    b"Cookie: session=client-cookie-secret",
    b"X-Forwarded-For: 203.0.113.9",
    b"X-Forwarded-Host: evil.example",
    b"X-Forwarded-Proto: http",
    b"Forwarded: for=203.0.113.9;host=evil.example",
    b"X-Real-IP: 203.0.113.9",
    b"Proxy-Authorization: Basic Y2xpZW50OnNlY3JldA==",
    b"X-Stainless-Lang: python",
    b"Openai-Organization: org-client",
)


def _assert_only_gateway_credentials(headers: dict[str, str], provider_key: str) -> None:
    lowered = {name.lower(): value for name, value in headers.items()}
    for name in (
        "cookie",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "forwarded",
        "x-real-ip",
        "proxy-authorization",
        "x-stainless-lang",
        "openai-organization",
    ):
        assert name not in lowered, (name, lowered)
    values = " ".join(lowered.values())
    assert KEY not in values
    assert "client-cookie-secret" not in values
    assert "203.0.113.9" not in values
    assert provider_key in values


def _forwarded(
    gateway: GatewayProcess,
    upstream: MockUpstream,
    path: str,
    body: dict[str, Any],
    *credentials: bytes,
) -> Any:
    """The headers the provider received for one request sent with `credentials` and every
    client-only header (the request must be served, by one upstream call)."""
    calls = len(upstream.requests)
    request = _post(path, json.dumps(body).encode(), *credentials, *CLIENT_ONLY)
    answer = _exchange(gateway, request)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    received = upstream.requests[calls:]
    assert len(received) == 1
    return received[0].headers


def test_client_headers_do_not_reach_an_openai_provider(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    headers = _forwarded(
        gateway,
        upstream,
        "/v1/chat/completions",
        CHAT,
        b"Authorization: Bearer " + KEY.encode(),
        b"X-Api-Key: " + KEY.encode(),
        b"OpenAI-Beta: assistants=v2",
    )
    _assert_only_gateway_credentials(headers, OPENAI_PROVIDER_KEY)
    assert headers["Authorization"] == f"Bearer {OPENAI_PROVIDER_KEY}"
    assert "x-api-key" not in {name.lower() for name in headers}
    assert headers.get("OpenAI-Beta", headers.get("openai-beta")) == "assistants=v2"  # allowed


def test_client_headers_do_not_reach_an_anthropic_provider(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    body = {"model": "claude", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    sent = _forwarded(
        gateway,
        upstream,
        "/v1/messages",
        body,
        b"X-Api-Key: " + KEY.encode(),
        b"Authorization: Bearer " + KEY.encode(),
        b"Anthropic-Version: 2023-06-01",
    )
    headers = {name.lower(): value for name, value in sent.items()}
    _assert_only_gateway_credentials(headers, ANTHROPIC_PROVIDER_KEY)
    assert headers["x-api-key"] == ANTHROPIC_PROVIDER_KEY
    assert "authorization" not in headers

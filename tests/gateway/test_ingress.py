import ipaddress
import os
import re
import socket

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from llmrelay.gateway.ids import MINTED_ID
from llmrelay.gateway.ingress import IngressMiddleware, choose_request_id, client_ip
from tests.support.asgi_server import ServedApp, read_to_close

TRUSTED = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"))


@pytest.mark.parametrize("given", [b"abc", b"A-b_9", b"x" * 64])
def test_well_formed_client_request_ids_are_kept(given: bytes) -> None:
    assert choose_request_id(given) == given.decode()
    assert MINTED_ID.get() is None  # a client's id may have been used: not minted here


@pytest.mark.parametrize(
    "given",
    [
        None,
        b"",
        b"x" * 65,
        b"has space",
        b"semi;colon",
        b"\xff\xfe",
        b"a/b",
        b"abc\n",  # `$` alone would let a final line feed through into the response header
        b"abc\r\nSet-Cookie: x=1",
    ],
)
def test_anything_else_gets_a_fresh_unguessable_id(given: bytes | None) -> None:
    first, second = choose_request_id(given), choose_request_id(given)
    assert first != second
    assert re.fullmatch(r"req_[0-9a-f]{32}", first)
    assert MINTED_ID.get() == second  # prepaid admission in memory may trust it


def test_forwarded_for_is_ignored_from_untrusted_peers() -> None:
    assert client_ip("203.0.113.9", b"1.2.3.4", TRUSTED) == "203.0.113.9"
    assert client_ip("10.1.1.1", b"1.2.3.4", ()) == "10.1.1.1"


def test_forwarded_for_from_a_trusted_proxy_gives_the_first_untrusted_hop() -> None:
    assert client_ip("10.1.1.1", b"1.2.3.4", TRUSTED) == "1.2.3.4"
    # A client cannot spoof by prepending: we walk from the right and stop at the first
    # address our proxies did not vouch for.
    assert client_ip("10.1.1.1", b"6.6.6.6, 1.2.3.4, 10.2.2.2", TRUSTED) == "1.2.3.4"
    assert client_ip("127.0.0.1", b"10.0.0.5", TRUSTED) == "10.0.0.5"


def test_garbage_in_forwarded_for_is_not_believed() -> None:
    assert client_ip("10.1.1.1", b"not-an-ip", TRUSTED) == "10.1.1.1"
    assert client_ip("10.1.1.1", b"1.2.3.4, bogus", TRUSTED) == "10.1.1.1"


def test_fresh_ids_are_ordered_by_time_and_do_not_repeat() -> None:
    ids = [choose_request_id(None) for _ in range(5000)]  # crosses several buffer refills
    assert len(set(ids)) == 5000
    assert [i[:16] for i in ids] == sorted(i[:16] for i in ids)
    assert len({i[16:] for i in ids}) == 5000  # the random part alone is unique


def test_a_forked_child_does_not_reuse_the_parents_randomness() -> None:
    choose_request_id(None)  # the parent has a buffer now
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(write_end, choose_request_id(None)[16:].encode())
        os._exit(0)
    os.close(write_end)
    child_random = os.read(read_end, 100).decode()
    os.waitpid(pid, 0)
    parent_random = choose_request_id(None)[16:]
    assert child_random != parent_random


# -- the ingress as the process boundary of the routes behind it --------------------------


async def _cut_answer(scope: Scope, receive: Receive, send: Send) -> None:
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]}
    )
    await send({"type": "http.response.body", "body": b"12345", "more_body": True})
    raise RuntimeError("a bug half way through the answer")


async def _no_answer(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("a bug before any answer")


def _fails_after_answering(request: Request) -> Response:
    raise RuntimeError("a bug: Starlette answers 500, then re-raises it for the server")


def _behind_ingress() -> IngressMiddleware:
    routes = Starlette(
        routes=[
            Route("/answered", _fails_after_answering),
            Route("/ok", lambda request: PlainTextResponse("ok")),
        ]
    )
    raw = {"/cut": _cut_answer, "/none": _no_answer}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await raw.get(scope["path"], routes)(scope, receive, send)

    return IngressMiddleware(app, max_body_bytes=1024, trusted_proxies=())


def _answer(conn: socket.socket, request: bytes) -> tuple[bytes, bytes]:
    """(head, body) of one answer with a Content-Length, read on a kept-alive connection."""
    conn.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE)[1])  # type: ignore[index]
    while len(body) < length:
        chunk = conn.recv(65536)
        assert chunk, "closed mid-answer"
        body += chunk
    return head, body


def test_a_failure_after_a_whole_answer_keeps_the_connection() -> None:
    """Starlette's 500 went out whole, then the error reached uvicorn, which closed the
    connection unannounced: a client reusing it got a reset (the flake of
    test_signup_postgres). The ingress logs it and the connection serves the next request."""
    with ServedApp(_behind_ingress()) as served, served.connect() as conn:
        head, _ = _answer(conn, b"GET /answered HTTP/1.1\r\nHost: t\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 500 ")
        assert b"x-request-id: req_" in head
        head, body = _answer(conn, b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == b"ok"


def test_a_failure_before_any_answer_is_a_500_in_the_error_shape() -> None:
    with ServedApp(_behind_ingress()) as served, served.connect() as conn:
        head, body = _answer(conn, b"GET /none HTTP/1.1\r\nHost: t\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 500 ")
        assert b"x-request-id: req_" in head
        assert orjson.loads(body)["error"]["message"] == "internal error"
        head, _ = _answer(conn, b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")


def test_a_failure_mid_answer_cuts_the_connection() -> None:
    """A cut answer must never look whole: the connection ends before its 10 bytes."""
    with ServedApp(_behind_ingress()) as served, served.connect() as conn:
        conn.sendall(b"GET /cut HTTP/1.1\r\nHost: t\r\n\r\n")
        received = read_to_close(conn)
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == b"12345"

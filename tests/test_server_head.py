"""uvicorn with its response heads written by llmrelay (server_head.py): byte for byte what
stock uvicorn writes, over real connections to real uvicorn servers, for the heads the fast
path writes itself and for those it hands back to uvicorn."""

from __future__ import annotations

import asyncio
import select
import threading
from typing import Any

import uvicorn
from uvicorn.protocols.http import httptools_impl

from llmrelay.gateway import response_head
from llmrelay.server_head import CHECKED_VERSIONS, FastHeadCycle, supported
from llmrelay.server_head import _Base as StockCycle  # uvicorn's own, even once installed
from tests.support.asgi_server import ServedApp, read_to_close

_JSON = [(b"content-type", b"application/json"), (b"Content-Length", b"2")]
#: path -> (status, headers, body chunks)
ANSWERS: dict[str, tuple[int, list[tuple[bytes, bytes]], list[bytes]]] = {
    "/json": (200, [*_JSON, (b"X-Request-Id", b"req-1\tx")], [b"{}"]),
    "/sse": (200, [(b"content-type", b"text/event-stream")], [b"data: 1\n\n", b"data: 2\n\n"]),
    "/empty": (204, [], []),
    "/not-modified": (304, [(b"etag", b'"1"')], []),
    "/close": (200, [*_JSON, (b"Connection", b"keep-alive, Close")], [b"{}"]),
    "/chunked": (200, [(b"Transfer-Encoding", b"chunked")], [b"abc"]),
    "/both": (200, [(b"transfer-encoding", b"chunked"), (b"content-length", b"3")], [b"abc"]),
    "/odd-name": (200, [(b"x-\xffname", b"1"), *_JSON], [b"{}"]),
    "/bad-value": (200, [(b"x-bad", b"a\x01b"), *_JSON], [b"{}"]),
    "/bad-length": (200, [(b"content-length", b"+2")], [b"{}"]),
    "/teapot": (418, _JSON, [b"{}"]),
}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    # (Any other path: the one that closes the connection after the answers read: CLOSER.)
    status, headers, chunks = ANSWERS.get(scope["path"], (204, [], []))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    for i, chunk in enumerate(chunks):
        more = i < len(chunks) - 1
        await send({"type": "http.response.body", "body": chunk, "more_body": more})
    if not chunks:
        await send({"type": "http.response.body", "body": b""})


def _requests(path: str) -> list[bytes]:
    host = b"Host: t\r\n"
    return [
        b"GET %s HTTP/1.1\r\n%s\r\n" % (path.encode(), host),
        b"HEAD %s HTTP/1.1\r\n%s\r\n" % (path.encode(), host),
        b"GET %s HTTP/1.1\r\n%sConnection: close\r\n\r\n" % (path.encode(), host),
        b"GET %s HTTP/1.0\r\n%s\r\n" % (path.encode(), host),
    ]


Cycle = type[httptools_impl.RequestResponseCycle]


def _serve_with(cycle: Cycle, requests: list[bytes]) -> list[bytes]:
    """The raw answers of a server whose connections make their cycles from `cycle`."""
    saved = httptools_impl.RequestResponseCycle
    httptools_impl.RequestResponseCycle = cycle  # type: ignore[misc]
    try:
        with ServedApp(app) as served:
            return [served.raw(request) for request in requests]
    finally:
        httptools_impl.RequestResponseCycle = saved  # type: ignore[misc]


def test_every_answer_is_written_as_stock_uvicorn_writes_it() -> None:
    requests = [request for path in ANSWERS for request in _requests(path)]
    stock = _serve_with(StockCycle, requests)
    response_head._NAMES.clear()
    fast = _serve_with(FastHeadCycle, requests)
    for request, a, b in zip(requests, stock, fast, strict=True):
        assert b == a, request
        # uvicorn refuses a control character in a value once the answer has started: it
        # logs the app's error and closes the connection without a word.
        assert bool(b) == (b"/bad-value" not in request), request
    # The fast path wrote the heads it could vouch for (and remembered their names), and
    # left the others to uvicorn.
    assert response_head._NAMES[b"X-Request-Id"] == b"x-request-id"
    assert b"x-\xffname" not in response_head._NAMES
    assert b"HTTP/1.1 418 I'm a Teapot" in fast[_index(requests, "/teapot")]


def _index(requests: list[bytes], path: str) -> int:
    return next(i for i, r in enumerate(requests) if r.startswith(b"GET %s " % path.encode()))


def test_keep_alive_carries_several_answers_on_one_connection() -> None:
    two = b"GET /json HTTP/1.1\r\nHost: t\r\n\r\nGET /sse HTTP/1.1\r\nHost: t\r\n\r\n"
    stock = _serve_with(StockCycle, [two])
    fast = _serve_with(FastHeadCycle, [two])
    assert fast == stock
    assert fast[0].count(b"HTTP/1.1 200 OK") == 2
    assert b"transfer-encoding: chunked\r\n" in fast[0]


def test_a_json_heads_waits_for_its_body_and_a_streams_does_not() -> None:
    """Once the app's response start has been handled, a stream's head is at the client
    (uvloop writes at once, and loopback delivers within the write) while a JSON answer's
    is not: it goes out with the body, in one write."""
    started, release = threading.Event(), threading.Event()

    async def gated(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        status, headers, chunks = ANSWERS[scope["path"]]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        started.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 60)
        for i, chunk in enumerate(chunks):
            await send(
                {"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1}
            )

    saved = httptools_impl.RequestResponseCycle
    httptools_impl.RequestResponseCycle = FastHeadCycle  # type: ignore[misc]
    try:
        with ServedApp(gated) as served:
            for path, head_first in (("/json", False), ("/sse", True), ("/teapot", False)):
                started.clear()
                release.clear()
                with served.connect() as conn:
                    conn.sendall(
                        b"GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % path.encode()
                    )
                    assert started.wait(60)
                    readable = select.select([conn], [], [], 0)[0]
                    assert bool(readable) == head_first, path
                    release.set()
                    answer = read_to_close(conn)
                status, _, chunks = ANSWERS[path]
                assert answer.startswith(b"HTTP/1.1 %d " % status), answer
                assert answer.endswith(chunks[-1] if not head_first else b"0\r\n\r\n"), answer
    finally:
        httptools_impl.RequestResponseCycle = saved  # type: ignore[misc]


def test_installed_only_for_the_uvicorn_versions_it_was_checked_against() -> None:
    """Fails when the installed uvicorn is newer than the one FastHeadCycle was checked
    against: compare its RequestResponseCycle.send with the fields FastHeadCycle sets, run
    this file, then add the version to CHECKED_VERSIONS."""
    assert supported(), f"uvicorn {uvicorn.__version__} is not in {CHECKED_VERSIONS}"
    assert not supported("0.1.0")
    assert supported(f"{CHECKED_VERSIONS[-1]}.7")

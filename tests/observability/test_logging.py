"""The logging set-up in a real process: structlog's and the standard library's lines are
both JSON with the request id and redaction; and, under a real uvicorn, the request id of one
request is not seen by the next one on the same keep-alive connection."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from llmrelay.gateway.ingress import IngressMiddleware
from llmrelay.observability.logging import REQUEST_ID
from tests.support.ports import free_port

SECRET = "Zq8vT2mK9xLr4NwB7yHc"

_SCRIPT = textwrap.dedent(
    f"""
    import logging
    import structlog
    from llmrelay.observability.logging import REQUEST_ID, configure_logging

    configure_logging("debug")
    log = structlog.get_logger("test")
    log.info("starting", api_key="{SECRET}")
    REQUEST_ID.set("req_one")
    log.warning("upstream_said", error="Authorization: Bearer {SECRET}")
    log.info("explicit", request_id="req_given")
    logging.getLogger("uvicorn.error").info("peer sent sk-{SECRET} via %s", "GET /x?key={SECRET}")
    logging.getLogger("uvicorn.error").debug("uvicorn debug is on")
    logging.getLogger("aiosqlite").debug("executing INSERT ... ('{SECRET}',)")
    try:
        raise ValueError("bad header x-api-key: {SECRET}")
    except ValueError:
        logging.getLogger("aiohttp.server").exception("Error handling request")
        log.exception("unhandled_error")
    REQUEST_ID.set(None)
    log.info("after")
    """
)


def test_structlog_and_standard_library_lines_are_json_with_request_id_and_redaction() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert SECRET not in done.stderr
    by_event = {event["event"]: event for event in events}
    assert by_event["starting"]["api_key"] == "[REDACTED]"
    assert "request_id" not in by_event["starting"]
    assert by_event["upstream_said"]["request_id"] == "req_one"
    assert by_event["upstream_said"]["error"] == "Authorization: Bearer [REDACTED]"
    assert by_event["explicit"]["request_id"] == "req_given"
    foreign = by_event["peer sent sk-[REDACTED] via GET /x?key=[REDACTED]"]
    assert foreign["logger"] == "uvicorn.error"
    assert foreign["level"] == "info"
    assert foreign["request_id"] == "req_one"
    assert "timestamp" in foreign
    assert "uvicorn debug is on" in by_event  # LLMRELAY_LOG_LEVEL reaches uvicorn...
    assert not any("INSERT" in event["event"] for event in events)  # ...not library internals
    failures = [event for event in events if "exception" in event]
    assert len(failures) == 2
    for failure in failures:
        assert failure["level"] == "error"
        assert failure["request_id"] == "req_one"
        assert "ValueError: bad header x-api-key: [REDACTED]" in failure["exception"]
    assert "request_id" not in by_event["after"]


# -- the request id under a real uvicorn: one task (and context) per request -----------------


async def _inner(scope: Scope, receive: Receive, send: Send) -> None:
    body = json.dumps(
        {
            "before": scope["before"],
            "during": REQUEST_ID.get(),
            "port": scope["client"][1],
        }
    ).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


_ingress = IngressMiddleware(_inner, max_body_bytes=1000, trusted_proxies=())


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """What the request id is when a request arrives (before ingress sets it), and after."""
    scope["before"] = REQUEST_ID.get()
    await _ingress(scope, receive, send)


@pytest.fixture
def server() -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(
        _app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",  # as in production (server.py)
        http="httptools",
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
    )
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(10)


def test_a_later_request_on_the_same_connection_does_not_inherit_the_request_id(
    server: str,
) -> None:
    with httpx.Client(base_url=server) as client:
        answers: list[dict[str, Any]] = [
            client.get("/", headers={"x-request-id": f"req-{n}"}).json() for n in range(3)
        ]
    assert len({answer["port"] for answer in answers}) == 1  # one keep-alive connection
    assert [answer["during"] for answer in answers] == ["req-0", "req-1", "req-2"]
    assert [answer["before"] for answer in answers] == [None, None, None]

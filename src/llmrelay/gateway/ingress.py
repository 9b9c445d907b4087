"""ASGI ingress for every HTTP request: request id, client IP, body cap.

Pure ASGI (no per-request objects beyond a small context) so it costs the hot path little.
The context travels in `scope["llmrelay"]`; handlers read it instead of re-deriving it.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Sequence
from typing import Final

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmrelay.gateway.conversation import SESSION_HEADERS
from llmrelay.gateway.errors import GatewayError, PayloadTooLarge
from llmrelay.gateway.ids import MINTED_ID, REQUEST_IDS
from llmrelay.observability.logging import REQUEST_ID
from llmrelay.protocols.openai import error_body

#: (fullmatch: `$` would also match before a final line feed, and the id goes into a header)
_CLIENT_REQUEST_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
log = structlog.get_logger(__name__)


class RequestContext:
    """What ingress learnt of a request. (A plain class: one per request, and under mypyc a
    dataclass keeps a Python `__init__`.)"""

    __slots__ = ("client_ip", "request_id", "route_tag", "session_id", "started", "user_agent")

    def __init__(
        self,
        request_id: str,
        client_ip: str | None,
        started: float,
        route_tag: str | None = None,
        session_id: str | None = None,
        user_agent: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.client_ip = client_ip
        self.started = started
        #: `x-llmrelay-route-tag`, for the `tag` routing strategy
        self.route_tag = route_tag
        #: The conversation's id from its session header (`x-llmrelay-session-id`, or one a
        #: coding agent sends: gateway/conversation.py): keeps it on the route that served it
        self.session_id = session_id
        #: The client's User-Agent (first 200 characters), for its records
        self.user_agent = user_agent


def choose_request_id(client_value: bytes | None) -> str:
    """Keep a well-formed client id; anything else gets a fresh unguessable one (MINTED_ID
    says which, for the rest of the request)."""
    if client_value is not None:
        text = client_value.decode("latin-1")
        if _CLIENT_REQUEST_ID.fullmatch(text):
            MINTED_ID.set(None)
            return text
    minted = REQUEST_IDS.new()
    MINTED_ID.set(minted)
    return minted


def client_ip(
    peer: str | None, forwarded_for: bytes | None, trusted: Sequence[IPNetwork]
) -> str | None:
    """The client's address. X-Forwarded-For is believed only from trusted proxies, walked
    from the right, stopping at the first hop that is not itself a trusted proxy."""
    if peer is None or not trusted or forwarded_for is None:
        return peer
    if not _is_trusted(peer, trusted):
        return peer
    hops = [h.strip() for h in forwarded_for.decode("latin-1").split(",") if h.strip()]
    address = peer
    for hop in reversed(hops):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return address  # garbage in the header: trust what we had
        address = hop
        if not _is_trusted(hop, trusted):
            return hop
    return address


def _is_trusted(address: str, trusted: Sequence[IPNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def begin(scope: Scope, trusted_proxies: Sequence[IPNetwork]) -> tuple[RequestContext, int | None]:
    """The request's context and its declared Content-Length (None if absent or invalid)."""
    given_id = None
    forwarded_for = None
    content_length = None
    route_tag = None
    session_id = None
    session_rank = len(SESSION_HEADERS)
    user_agent = None
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            given_id = value
        elif name == b"x-forwarded-for":
            forwarded_for = value
        elif name == b"content-length":
            content_length = value
        elif name == b"x-llmrelay-route-tag":
            route_tag = value.decode("latin-1").strip() or None
        elif name == b"user-agent":
            user_agent = value[:200].decode("latin-1")
        else:
            rank = SESSION_HEADERS.get(name)
            if rank is not None and rank < session_rank:
                found = value[:200].decode("latin-1").strip()
                if found:
                    session_id, session_rank = found, rank
    client = scope.get("client")
    context = RequestContext(
        request_id=choose_request_id(given_id),
        client_ip=client_ip(client[0] if client else None, forwarded_for, trusted_proxies),
        started=time.perf_counter(),
        route_tag=route_tag,
        session_id=session_id,
        user_agent=user_agent,
    )
    declared = None
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = None
    return context, declared


class IngressMiddleware:
    """The same ingress for routes served through Starlette (health, metrics, admin):
    request id header, client IP, body cap. The data plane does this inline (app.py)."""

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, trusted_proxies: Sequence[IPNetwork]
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.trusted_proxies = tuple(trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        context, declared = begin(scope, self.trusted_proxies)
        scope["llmrelay"] = context
        REQUEST_ID.set(context.request_id)  # on every line logged while handling it
        answer = _Answer(send, (b"x-request-id", context.request_id.encode()))
        try:
            await self._handle(scope, receive, answer, context, declared)
        except Exception:  # process boundary: see _Answer
            log.exception("unhandled_error", request_id=context.request_id, path=scope["path"])
            if answer.complete:
                return  # the client has its whole answer: the connection stays usable
            if answer.started:
                raise  # a cut answer must not look whole: the server aborts the connection
            body = error_body(GatewayError("internal error"), context.request_id)
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        answer.id_header,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})

    async def _handle(
        self,
        scope: Scope,
        receive: Receive,
        send_with_id: _Answer,
        context: RequestContext,
        declared: int | None,
    ) -> None:
        limit = self.max_body_bytes
        if declared is not None:
            if declared > limit:
                await refuse_too_large(context.request_id, limit, send_with_id.send)
                return
            # The HTTP parser delivers exactly the declared length: no cap to apply.
            await self.app(scope, receive, send_with_id)
            return
        # No Content-Length (chunked): read the body here, up to the cap, so that passing it
        # is a 413 in the error shape whichever handler would have read it (FastAPI turns an
        # error raised while it reads a body into a 400). These routes' bodies are small.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was whole
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > limit:
                await refuse_too_large(context.request_id, limit, send_with_id.send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay_receive() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay_receive, send_with_id)


class _Answer:
    """The `send` the routes behind the ingress get: adds the request id header and
    remembers how far the answer went.

    Starlette's ServerErrorMiddleware answers 500 and then re-raises, for the server to log;
    uvicorn then closes the connection, after the whole 500 has gone out and without saying
    so in it. A client that reuses the kept-alive connection in between (its answer was
    complete) has its next request refused with a TCP reset. So the ingress is the process
    boundary for these routes: it logs, and lets the connection live when the answer was
    whole."""

    __slots__ = ("complete", "id_header", "send", "started")

    def __init__(self, send: Send, id_header: tuple[bytes, bytes]) -> None:
        self.send = send
        self.id_header = id_header
        self.started = False
        self.complete = False

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            message["headers"] = [*message.get("headers", ()), self.id_header]
            self.started = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        await self.send(message)


def _too_large_message(limit: int) -> str:
    return f"request body is larger than the limit of {limit} bytes"


async def refuse_too_large(
    request_id: str,
    limit: int,
    send: Send,
    render: Callable[[GatewayError, str], bytes] = error_body,
) -> None:
    """Answer 413 from the Content-Length alone, without reading the body, in the error
    shape of the route's protocol (`render`: OpenAI's unless told)."""
    error = PayloadTooLarge(_too_large_message(limit))
    body = render(error, request_id)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                (b"x-request-id", request_id.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

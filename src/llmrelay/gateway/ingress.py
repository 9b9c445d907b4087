"""ASGI ingress for every HTTP request: request id, client IP, body cap.

Pure ASGI (no per-request objects beyond a small context) so it costs the hot path little.
The context travels in `scope["llmrelay"]`; handlers read it instead of re-deriving it.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmrelay.gateway.errors import PayloadTooLarge
from llmrelay.protocols.openai import error_body

_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(slots=True)
class RequestContext:
    request_id: str
    client_ip: str | None
    started: float


def choose_request_id(client_value: bytes | None) -> str:
    """Keep a well-formed client id; anything else gets a fresh unguessable one."""
    if client_value is not None:
        text = client_value.decode("latin-1")
        if _CLIENT_REQUEST_ID.match(text):
            return text
    return "req_" + secrets.token_hex(12)


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


class IngressMiddleware:
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
        given_id = None
        forwarded_for = None
        content_length = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                given_id = value
            elif name == b"x-forwarded-for":
                forwarded_for = value
            elif name == b"content-length":
                content_length = value
        request_id = choose_request_id(given_id)
        peer = scope["client"][0] if scope.get("client") else None
        context = RequestContext(
            request_id=request_id,
            client_ip=client_ip(peer, forwarded_for, self.trusted_proxies),
            started=time.perf_counter(),
        )
        scope["llmrelay"] = context
        id_header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        limit = self.max_body_bytes
        if content_length is not None and _too_long(content_length, limit):
            await _refuse_too_large(request_id, limit, send_with_id)
            return

        received = 0

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(_too_large_message(limit))
            return message

        await self.app(scope, capped_receive, send_with_id)


def _too_long(content_length: bytes, limit: int) -> bool:
    try:
        return int(content_length) > limit
    except ValueError:
        return False


def _too_large_message(limit: int) -> str:
    return f"request body is larger than the limit of {limit} bytes"


async def _refuse_too_large(request_id: str, limit: int, send: Send) -> None:
    """Answer 413 from the Content-Length alone, without reading the body."""
    body = error_body(PayloadTooLarge(_too_large_message(limit)), request_id)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

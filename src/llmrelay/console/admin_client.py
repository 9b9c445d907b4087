"""Calls to the admin API in process, over ASGI: the console's only way to read or change
anything. Each call is a sub-request of the browser's request that carries its session
cookie, its CSRF token, its User-Agent and the ingress context (request id, client address),
so the admin API authenticates, checks, validates and audits it exactly as a call over the
network, and the audit entry names the browser's request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.types import ASGIApp, Message, Scope

#: Where app.py mounts the admin API.
ADMIN_PREFIX = "/api/admin"
#: The browser's headers a sub-request carries (the cookie only as the session cookie).
_FORWARDED = (b"user-agent", b"accept-language")


@dataclass(frozen=True, slots=True)
class Answer:
    """What the admin API answered: its status, headers and JSON body (None when empty)."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value.decode("latin-1")
        return None

    def cookies(self) -> list[str]:
        """The Set-Cookie values, to pass on to the browser (sign-in, sign-out, password)."""
        return [v.decode("latin-1") for k, v in self.headers if k.lower() == b"set-cookie"]

    @property
    def error(self) -> Mapping[str, Any]:
        """The admin API's error (`{"message", "type", "field"}`), or an empty mapping."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            found: Mapping[str, Any] = self.body["error"]
            return found
        return {}

    @property
    def message(self) -> str:
        return str(self.error.get("message") or f"the admin API answered {self.status}")

    @property
    def field(self) -> str | None:
        found = self.error.get("field")
        return str(found) if found else None

    @property
    def errors(self) -> list[tuple[str | None, str]]:
        """Every (field, message) the admin API named: its `errors` list when the input
        broke several rules, else the one error."""
        listed = self.error.get("errors")
        if isinstance(listed, list) and listed:
            return [
                (str(e["field"]) if e.get("field") else None, str(e.get("message", "")))
                for e in listed
                if isinstance(e, dict)
            ]
        if not self.error:
            return [(None, self.message)]
        return [(self.field, self.message)]

    @property
    def data(self) -> list[Any]:
        """The rows of a list answer (`{"data": [...]}`)."""
        if self.ok and isinstance(self.body, dict) and isinstance(self.body.get("data"), list):
            rows: list[Any] = self.body["data"]
            return rows
        return []


@dataclass(slots=True)
class AdminClient:
    """The admin API as seen by one browser request (its cookie and CSRF token)."""

    app: ASGIApp
    scope: Scope
    session_cookie: str | None
    csrf_token: str | None = None
    #: Extra Set-Cookie values the admin API answered during this request.
    cookies: list[str] = field(default_factory=list)

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Answer:
        return await self.call("GET", path, query=query)

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        if_match: int | str | None = None,
    ) -> Answer:
        raw = b"" if body is None else orjson.dumps(body)
        headers = [(k, v) for k, v in self.scope.get("headers", ()) if k in _FORWARDED]
        headers.append((b"host", b"console"))
        if self.session_cookie:
            headers.append((b"cookie", f"llmrelay_session={self.session_cookie}".encode()))
        if self.csrf_token and method not in ("GET", "HEAD"):
            headers.append((b"x-csrf-token", self.csrf_token.encode("latin-1")))
        if if_match is not None:  # a version (5), or an ETag as answered ("d41d8c")
            tag = str(if_match)
            tag = tag if tag.startswith(('"', "W/")) else f'"{tag}"'
            headers.append((b"if-match", tag.encode("latin-1")))
        if body is not None:
            headers.append((b"content-type", b"application/json"))
            headers.append((b"content-length", str(len(raw)).encode()))
        answer = await request(self.app, self.scope, method, path, query, headers, raw)
        self.cookies.extend(answer.cookies())
        return answer


def _query(query: Mapping[str, Any] | None) -> bytes:
    if not query:
        return b""
    pairs: list[tuple[str, str]] = []
    for name, value in query.items():
        if value is None or value == "":
            continue
        values: Iterable[Any] = value if isinstance(value, list | tuple) else (value,)
        pairs.extend((name, str(v).lower() if isinstance(v, bool) else str(v)) for v in values)
    return urlencode(pairs).encode()


async def request(
    app: ASGIApp,
    parent: Scope,
    method: str,
    path: str,
    query: Mapping[str, Any] | None,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
) -> Answer:
    """One ASGI request to the admin app, shaped as the mount at /api/admin shapes it."""
    full = ADMIN_PREFIX + path
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": parent.get("scheme", "http"),
        "path": full,
        "raw_path": full.encode(),
        "root_path": ADMIN_PREFIX,
        "query_string": _query(query),
        "headers": headers,
        "client": parent.get("client"),
        "server": parent.get("server"),
        # The ingress context: the audit entry's request id and client address.
        "llmrelay": parent.get("llmrelay"),
    }
    sent = False
    status = 500
    response_headers: tuple[tuple[bytes, bytes], ...] = ()
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if sent:  # nothing more will come: a listener for a disconnect waits until cancelled
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, response_headers
        if message["type"] == "http.response.start":
            status = int(message["status"])
            response_headers = tuple(message.get("headers", ()))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    raw = b"".join(chunks)
    try:
        parsed = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        parsed = {"error": {"message": raw[:200].decode("utf-8", "replace"), "type": "api"}}
    return Answer(status, response_headers, parsed)

"""A minimal asyncio Redis client: what the limiter needs, at a few microseconds per call.

redis-py costs the limiter hundreds of microseconds of CPU per admission (command packing
in Python, a Python reply parser, a connection pool checkout per command). Here one TCP
connection carries every call, pipelined: a call writes its command at once and waits on a
future; replies come back in order, so a deque of futures is resolved as they arrive. Redis
runs commands one at a time anyway, so more connections would buy nothing but overhead.
hiredis packs the commands and parses the replies (RESP2), both in C.

Failure is loud and prompt, because the limiter must fall back at once when Redis is
away: a lost connection, a refused connect or a call older than `timeout_s` fails every
pending call with RespConnectionError and drops the connection (its replies could no longer
be matched to calls); the next call connects again. One watchdog timer per connection
watches the oldest pending call, instead of a timer per call.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

#: What a command's arguments may be (floats travel as their repr: exact round trips).
Arg = bytes | str | int | float

#: How often the watchdog looks at the oldest pending call (at most; less for tiny timeouts).
WATCH_EVERY_S: Final = 0.05


class RespError(Exception):
    """Redis answered with an error reply (the connection stays usable)."""


class RespConnectionError(Exception):
    """Redis cannot be reached, went away, or did not answer in time."""


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None = field(repr=False)
    #: `rediss://`: TLS, as managed Redis services require; the server's certificate is
    #: checked against `ca_file` (else the system's CAs) unless `verify` is off.
    tls: bool = False
    ca_file: str | None = None
    verify: bool = True


#: The query parameters read from a Redis URL (the names redis-py uses, so the one URL
#: serves both this client and the config signals' redis-py connections).
_CERT_REQS: Final = {"required": True, "optional": True, "none": False}


def parse_url(url: str) -> Address:
    """`redis[s]://[[user]:password@]host[:port][/db][?ssl_ca_certs=FILE&ssl_cert_reqs=none]`."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(
            f"unsupported Redis URL scheme {parts.scheme!r} (redis://, or rediss:// for TLS)"
        )
    query = parse_qs(parts.query)
    reqs = query.get("ssl_cert_reqs", ["required"])[-1].lower()
    if reqs not in _CERT_REQS:
        raise ValueError(f"ssl_cert_reqs={reqs!r} in the Redis URL: use required, optional or none")
    path = parts.path.strip("/")
    return Address(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 6379,
        db=int(path) if path else 0,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=parts.scheme == "rediss",
        ca_file=query.get("ssl_ca_certs", [None])[-1],
        verify=_CERT_REQS[reqs],
    )


def tls_context(address: Address) -> ssl.SSLContext | None:
    """The TLS context of a `rediss://` address (None: plain TCP)."""
    if not address.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=address.ca_file)
    except OSError as exc:
        message = f"ssl_ca_certs in the Redis URL: cannot read {address.ca_file}: {exc}"
        raise ValueError(message) from None
    if not address.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


#: One command as RESP bytes, in one C call: a third of the CPU of the best pure-Python loop
#: (`b"*%d\r\n"` then `b"$%d\r\n%b\r\n"` per argument). Floats are packed as their repr.
_pack_command = cast(Callable[[tuple[Arg, ...]], bytes], hiredis.pack_command)


def pack(args: Sequence[Arg]) -> bytes:
    return _pack_command(tuple(args))


def pack_args(args: Sequence[Arg]) -> bytes:
    """The arguments alone (no `*count` header): fragments to join into one command."""
    packed = _pack_command(tuple(args))
    return packed[packed.index(b"\n") + 1 :]


class _Connection(asyncio.Protocol):
    """One TCP connection and the calls waiting on it, oldest first."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        self._watch_every = min(WATCH_EVERY_S, timeout_s / 4)
        self._reader = hiredis.Reader(replyError=RespError)
        self._pending: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []  # commands not written yet
        self._watchdog: asyncio.TimerHandle | None = None
        #: Set once the connection must not carry another call.
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not isinstance-checked: uvloop's transports do not derive from asyncio's classes.
        self._transport = cast(asyncio.Transport, transport)

    def send(self, payload: bytes) -> asyncio.Future[Any]:
        loop = self._loop
        future = loop.create_future()
        transport = self._transport
        if transport is None:  # dropped (the client does not come here once `lost` is set)
            self.lost = True
            future.set_exception(RespConnectionError("the connection was dropped"))
            return future
        self._pending.append((future, loop.time()))
        out = self._out
        out.append(payload)
        if len(out) == 1:
            loop.call_soon(self._write)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._watch_every, self._watch)
        return future

    def _write(self) -> None:
        """Every command sent since the last write, in one system call: calls made in the
        same turn of the event loop (a burst of requests) share it."""
        out, self._out = self._out, []
        if self._transport is not None and out:
            self._transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        pending = self._pending
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                self.drop(f"protocol error: {exc}")
                return
            if reply is False:
                return
            if not pending:
                self.drop("a reply nobody asked for")
                return
            future = pending.popleft()[0]
            if future.done():  # its caller was cancelled; the reply is still its own
                continue
            if isinstance(reply, RespError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.drop(f"connection lost: {exc}" if exc else "connection closed by the server")

    def _watch(self) -> None:
        self._watchdog = None
        if not self._pending or self.lost:
            return
        waited = self._loop.time() - self._pending[0][1]
        if waited > self._timeout_s:
            self.drop(f"no reply from Redis within {self._timeout_s} s")
        else:
            self._watchdog = self._loop.call_later(self._watch_every, self._watch)

    def drop(self, reason: str) -> None:
        """Fail every pending call and close: later replies would answer the wrong calls."""
        self.lost = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._out = []
        pending, self._pending = self._pending, deque()
        for future, _ in pending:
            if not future.done():
                future.set_exception(RespConnectionError(reason))
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.abort()


class RespClient:
    """Calls share one pipelined connection, opened on first use and again after a loss."""

    def __init__(self, url: str, *, timeout_s: float = 0.25) -> None:
        self.address = parse_url(url)
        self._tls = tls_context(self.address)
        self.timeout_s = timeout_s
        self._connection: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self._closed = False

    def call(self, *args: Arg) -> Awaitable[Any]:
        """Send a command now (pipelined behind earlier ones); await its reply."""
        return self.send(pack(args))

    def send(self, payload: bytes) -> Awaitable[Any]:
        """Send packed command bytes (see `pack`); the fast path creates no coroutine."""
        connection = self._connection
        if connection is not None and not connection.lost:
            return connection.send(payload)
        return self._send_later(payload)

    async def _send_later(self, payload: bytes) -> Any:
        connection = await self._connect()
        return await connection.send(payload)

    async def _connect(self) -> _Connection:
        if self._closed:
            raise RespConnectionError("the client is closed")
        connection = self._connection
        if connection is not None and not connection.lost:
            return connection
        if self._connecting is None:
            # One attempt for every waiting caller; a cancelled caller does not cancel it.
            self._connecting = asyncio.ensure_future(self._open())
            self._connecting.add_done_callback(self._opened)
        return await asyncio.shield(self._connecting)

    def _opened(self, attempt: asyncio.Future[_Connection]) -> None:
        self._connecting = None
        if attempt.cancelled():
            return
        if attempt.exception() is None:  # also marks a failure as retrieved
            self._connection = attempt.result()

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        address = self.address
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop, self.timeout_s),
                    address.host,
                    address.port,
                    ssl=self._tls,
                    server_hostname=address.host if self._tls is not None else None,
                ),
                self.timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            raise RespConnectionError(
                f"cannot connect to Redis at {address.host}:{address.port}: {exc!r}"
            ) from exc
        hello: list[Awaitable[Any]] = []
        if address.password is not None:
            auth = (address.username, address.password) if address.username else (address.password,)
            hello.append(connection.send(pack((b"AUTH", *auth))))
        if address.db:
            hello.append(connection.send(pack((b"SELECT", address.db))))
        try:
            for reply in hello:
                await reply
        except RespError as refused:
            connection.drop(str(refused))
            raise RespConnectionError(f"Redis refused the connection: {refused}") from refused
        if self._closed:
            connection.drop("the client is closed")
            raise RespConnectionError("the client is closed")
        return connection

    async def ping(self) -> bool:
        return bool(await self.call(b"PING") == b"PONG")

    async def close(self) -> None:
        # An attempt in flight is not cancelled (its waiters would see CancelledError): it
        # sees `_closed` when it is done and drops what it opened.
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.drop("the client is closed")


class Script:
    """A Lua script run by its SHA1 (EVALSHA), loaded again if Redis lost it (NOSCRIPT:
    restarted, flushed, or a new server behind the same address)."""

    def __init__(self, client: RespClient, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest().encode()

    def __call__(self, keys: Sequence[Arg], args: Sequence[Arg]) -> Awaitable[Any]:
        return self.run(pack((b"EVALSHA", self.sha, len(keys), *keys, *args)))

    def command(self, numkeys: int, count: int, body: bytes) -> bytes:
        """The EVALSHA command of `count` keys and args already packed into `body` (see
        `pack_args`), the first `numkeys` of them keys: callers that keep the fragments of
        arguments that rarely change pack only the others."""
        n = b"%d" % numkeys
        return b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%b\r\n$%d\r\n%b\r\n%b" % (
            count + 3,
            self.sha,
            len(n),
            n,
            body,
        )

    async def run(self, command: bytes) -> Any:
        """Send an EVALSHA command of this script; on NOSCRIPT load it and send again."""
        try:
            return await self.client.send(command)
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await self.load()
        return await self.client.send(command)

    async def load(self) -> None:
        await self.client.call(b"SCRIPT", b"LOAD", self.source)

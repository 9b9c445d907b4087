"""A response's status line and headers as uvicorn's httptools protocol would write them,
made by compiled code (llmrelay/server_head.py hands it uvicorn's response start).

uvicorn checks every header of every response with two regular-expression searches in
Python, lower-cases its name and compares it three times: about 5,000 instructions a
header, some 25k of an unlimited plain answer's 667k (bench --instructions). Here a
name already seen valid is looked up once, and the values are checked by a compiled loop.
Anything this does not vouch for (a name outside RFC 9110's token characters, a control
character in a value, a Content-Length that is not a number, a status without a line) makes
it answer None, and uvicorn's own code writes the head, or raises, as it always would."""

from __future__ import annotations

import re
from typing import Final

#: RFC 9110 5.1: a field name is a token.
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Names seen valid -> lower case (the gateway sends few distinct names; bounded all the same).
_NAMES: Final[dict[bytes, bytes]] = {}
_NAMES_MAX: Final = 4096
_CLOSE: Final = b"connection: close\r\n"
_CHUNKED: Final = b"transfer-encoding: chunked\r\n"


class Head:
    """The bytes to write and what uvicorn's cycle must know of them."""

    __slots__ = ("chunked", "data", "keep_alive", "length")

    def __init__(self, data: bytes, length: int, chunked: bool | None, keep_alive: bool) -> None:
        self.data = data
        #: The Content-Length announced (0 when chunked or none).
        self.length = length
        #: True: chunked; False: a Content-Length; None: neither (a body-less answer).
        self.chunked = chunked
        self.keep_alive = keep_alive


def _valid_value(value: bytes) -> bool:
    """No control character but the horizontal tab (a byte loop: compiled, cheaper than a
    regular-expression call)."""
    for i in range(len(value)):
        c = value[i]
        if (c < 32 and c != 9) or c == 127:
            return False
    return True


def _length(value: bytes) -> int:
    """A Content-Length's number; -1 when it is not plain digits (uvicorn then judges)."""
    if not 0 < len(value) <= 18:
        return -1
    number = 0
    for i in range(len(value)):
        c = value[i]
        if not 48 <= c <= 57:
            return -1
        number = number * 10 + c - 48
    return number


def response_head(
    status_lines: dict[int, bytes],
    status: int,
    headers: list[tuple[bytes, bytes]],
    keep_alive: bool,
    head_request: bool,
) -> Head | None:
    """uvicorn's response start: its status line, the headers (the server's default ones
    first), `connection: close` when the connection is not kept, and chunked framing when
    the answer gives no length (not for HEAD, 204 or 304)."""
    line = status_lines.get(status)
    if line is None:
        return None
    parts = [line]
    length, chunked, closing = 0, None, False
    names = _NAMES
    for name, value in headers:
        lowered = names.get(name)
        if lowered is None:
            if _TOKEN.fullmatch(name) is None:
                return None
            lowered = name.lower()
            if len(names) < _NAMES_MAX:
                names[name] = lowered
        if not _valid_value(value):
            return None
        if lowered == b"content-length" and chunked is None:
            length = _length(value)
            if length < 0:
                return None
            chunked = False
        elif lowered == b"transfer-encoding" and value.lower() == b"chunked":
            length, chunked = 0, True
        elif lowered == b"connection" and b"close" in [
            token.lower().strip() for token in value.split(b",")
        ]:
            keep_alive, closing = False, True
        parts.append(lowered)
        parts.append(b": ")
        parts.append(value)
        parts.append(b"\r\n")
    if not keep_alive and not closing:
        parts.append(_CLOSE)
    if chunked is None and not head_request and status != 204 and status != 304:
        chunked = True
        parts.append(_CHUNKED)
    parts.append(b"\r\n")
    return Head(b"".join(parts), length, chunked, keep_alive)

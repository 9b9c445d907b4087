"""Fresh request ids: unguessable, and ordered by time.

`req_` + 12 hex digits of Unix milliseconds + 20 hex digits (80 bits) from os.urandom.
Time first keeps inserts into the request_id index at its right edge; fully random ids
scatter them over the whole B-tree, which measurably slows the record writer once the table
is large. Randomness is drawn 4 KiB at a time: every os.urandom call is a system call, and
system calls are dear in a virtual machine. A forked child drops the parent's buffer.
"""

from __future__ import annotations

import os
import time
from contextvars import ContextVar
from typing import Final

_RANDOM_HEX: Final = 20  # 80 bits
_REFILL_BYTES: Final = 4096


class RequestIds:
    """The random part comes from a buffer turned to hex once per refill, and the time part
    is formatted once per millisecond: a new id is two string slices and a concatenation."""

    __slots__ = ("_hex", "_millis", "_offset", "_prefix")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._hex = ""
        self._offset = 0
        self._millis = -1
        self._prefix = ""

    def new(self) -> str:
        offset = self._offset
        if offset + _RANDOM_HEX > len(self._hex):
            self._hex = os.urandom(_REFILL_BYTES).hex()
            offset = 0
        self._offset = offset + _RANDOM_HEX
        millis = time.time_ns() // 1_000_000
        if millis != self._millis:
            self._millis = millis
            # (%-formatting: under mypyc an f-string's format spec is parsed at every call)
            self._prefix = "req_%012x" % millis  # noqa: UP031
        return self._prefix + self._hex[offset : offset + _RANDOM_HEX]


REQUEST_IDS: Final = RequestIds()
#: The id minted here for the request being handled, None when its client gave one: a
#: minted id was never used before, so a prepaid request with it needs no transaction to
#: prove it (billing/allowance.py); a client's may have been (409 request_id_reused).
MINTED_ID: Final[ContextVar[str | None]] = ContextVar("llmrelay_minted_id", default=None)
os.register_at_fork(after_in_child=REQUEST_IDS.reset)

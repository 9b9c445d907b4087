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

_RANDOM_BYTES = 10
_REFILL_BYTES = 4096


class RequestIds:
    __slots__ = ("_buffer", "_offset")

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0

    def reset(self) -> None:
        self._buffer = b""
        self._offset = 0

    def new(self) -> str:
        offset = self._offset
        if offset + _RANDOM_BYTES > len(self._buffer):
            self._buffer = os.urandom(_REFILL_BYTES)
            offset = 0
        self._offset = offset + _RANDOM_BYTES
        random_part = self._buffer[offset : offset + _RANDOM_BYTES].hex()
        return f"req_{time.time_ns() // 1_000_000:012x}{random_part}"


REQUEST_IDS = RequestIds()
os.register_at_fork(after_in_child=REQUEST_IDS.reset)

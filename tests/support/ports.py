"""Ports for the servers tests start, owned by the test process that asks.

A port the kernel picks (bind to port 0, close, hand the number to a server started later)
comes from the ephemeral range, the same range every outgoing connection's local port comes
from: between the close and the server's own bind, any connection on the machine may take
it ("address already in use", seen in CI). So the ports come from below that range, where the
kernel never assigns one by itself, and each pytest-xdist worker has a block of its own, so
two workers of one run never pick the same port. A port is handed out only after a bind of
it succeeded (something else, a service or a concurrent run, may hold one of ours), and
each process walks its block from a random place, so that two runs at once rarely meet. A
port the clients under test refuse to connect to (`REFUSED_BY_CLIENTS`) is never handed out.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

#: Below the kernel's ephemeral range (ip_local_port_range, 32768 and up on Linux).
FIRST_PORT = 10_000
LAST_PORT = 32_000
BLOCK = 2_000
#: The "bad ports" of the Fetch standard that fall in that range: browsers (Chromium) and
#: fetch() (Node's undici, under Gemini CLI and the other node clients) refuse to connect
#: to them ("fetch failed", cause "bad port"). R34: a stand-in upstream on 10080 and every
#: Gemini CLI run against it retried until killed. The rest of the list is below 10,000.
REFUSED_BY_CLIENTS = frozenset({10080})


def _worker_number() -> int:
    """gw0 -> 0, gw1 -> 1, ...; 0 outside pytest-xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


def _candidates() -> itertools.cycle[int]:
    blocks = (LAST_PORT - FIRST_PORT) // BLOCK
    start = FIRST_PORT + (_worker_number() % blocks) * BLOCK
    offset = random.randrange(BLOCK)
    ports = [start + (offset + i) % BLOCK for i in range(BLOCK)]
    ports = [port for port in ports if port not in REFUSED_BY_CLIENTS]
    return itertools.cycle(ports)


_CANDIDATES = _candidates()


def free_port() -> int:
    """A port of this process's block that nothing listens or lingers on now."""
    for _ in range(BLOCK):
        port = next(_CANDIDATES)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in this worker's block of {BLOCK}")

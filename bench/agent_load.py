"""The load of bench.agent: POST one large body at a fixed concurrency for a while, checking
every answer, and print one JSON line of figures (wrk's sends a body of at most a few kB
well, but its Lua answer check cannot read an Anthropic event stream's end).

    python -m bench.agent_load PORT PATH BODY_FILE CONNECTIONS SECONDS END FRAGMENT...

An answer is good when its status is 200, it ends with END (the last bytes of a whole
Message, or of its event stream) and carries every FRAGMENT in order.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from statistics import quantiles

import aiohttp

from bench.constants import BENCH_KEY
from bench.upstream import carries


async def _run(
    port: int,
    path: str,
    body: bytes,
    connections: int,
    seconds: float,
    end: bytes,
    pieces: list[str],
) -> dict[str, float | int]:
    url = f"http://127.0.0.1:{port}{path}"
    headers = {
        "authorization": f"Bearer {BENCH_KEY}",
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
    }
    latencies: list[float] = []
    bad = non200 = 0
    stop_at = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal bad, non200
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                latencies.append(time.perf_counter() - started)
                if response.status != 200:
                    non200 += 1
                elif not answer.rstrip().endswith(end) or not carries(answer, pieces):
                    bad += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(connections)))
        took = time.monotonic() - started
    cuts = quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "requests": len(latencies),
        "duration_s": took,
        "non200": non200,
        "bad_body": bad,
        "p50_ms": cuts[49] * 1000,
        "p90_ms": cuts[89] * 1000,
        "p99_ms": cuts[98] * 1000,
        "max_ms": max(latencies, default=0.0) * 1000,
    }


def main(argv: list[str]) -> None:
    port, path, body_file, connections, seconds, end, *pieces = argv
    body = Path(body_file).read_bytes()
    figures = asyncio.run(
        _run(int(port), path, body, int(connections), float(seconds), end.encode(), pieces)
    )
    print("AGENTJSON " + json.dumps(figures), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Where one `llmrelay serve`'s resident memory goes: at ready, after a soak, after c=256.

    python -m bench.memory                      # soak to 200k requests, then c=256 windows
    python -m bench.memory --soak 50000 --windows 2

The same process as the comparison's (`bench.systems.start_llmrelay`: `serve --config`,
restarted on its database, SQLite, records on, nginx as the provider), measured from
`/proc/PID/smaps` at three points: when `/readyz` answers, after the soak (plain and sse at
c=64), and after the c=256 windows. Each mapping's resident size is charged to a group:
Python's objects (anonymous memory and malloc's heap), each shared library over half a MiB,
the rest. VmHWM, the figure issue 36 bounds, is printed at the end. Results go to
bench/results/<time>-memory.json.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.constants import RESULTS
from bench.load import Driver
from bench.procs import memory_kb
from bench.systems import System, start_llmrelay
from bench.upstream import upstream

_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")
#: A library smaller than this (KiB) is counted under "other libraries".
_SMALL_KIB = 512


def _group(path: str) -> str:
    if not path or path.startswith("[anon") or path == "[heap]":
        return "python objects and malloc (anonymous, [heap])"
    if path.startswith("["):
        return "kernel mappings ([stack], [vdso], ...)"
    name = Path(path).name
    return name.split(".cpython")[0].split(".abi3")[0] if ".so" in name else name


def smaps_by_group(pid: int) -> dict[str, int]:
    """Resident KiB per group of mappings, largest first; small libraries summed."""
    groups: dict[str, int] = defaultdict(int)
    current = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if _HEADER.match(line):
            parts = line.split(maxsplit=5)
            current = _group(parts[5] if len(parts) > 5 else "")
        elif line.startswith("Rss:"):
            groups[current] += int(line.split()[1])
    merged: dict[str, int] = defaultdict(int)
    for name, kib in groups.items():
        merged[name if kib >= _SMALL_KIB else "other libraries and files"] += kib
    return dict(sorted(merged.items(), key=lambda item: -item[1]))


def _point(system: System, label: str) -> dict[str, Any]:
    pid = system.pids()[0]
    rss, hwm, groups = memory_kb([pid], "VmRSS"), memory_kb([pid], "VmHWM"), smaps_by_group(pid)
    print(
        f"\n{label}: {system.requests_total} requests, VmRSS {rss / 1024:.1f} MiB,"
        f" VmHWM {hwm / 1024:.1f} MiB"
    )
    for name, kib in list(groups.items())[:14]:
        print(f"  {kib / 1024:7.1f} MiB  {name}")
    return {
        "at": label,
        "requests": system.requests_total,
        "rss_kib": rss,
        "hwm_kib": hwm,
        "groups_kib": groups,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--soak", type=int, default=200_000, help="requests in the soak")
    parser.add_argument("--windows", type=int, default=3, help="c=256 windows of 5 s")
    args = parser.parse_args()
    modes = ["plain", "sse"]
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llmrelay-memory-") as temp:
        folder = Path(temp)
        with upstream(folder, modes) as nginx:
            system = start_llmrelay(folder, nginx.port, modes)
            try:
                driver = Driver(folder, nginx)
                points.append(_point(system, "ready"))
                driver.soak(system, modes, args.soak)
                points.append(_point(system, "after the soak"))
                for _ in range(args.windows):
                    driver.window(system, "plain", 256, 5.0)
                points.append(_point(system, "after the c=256 windows"))
            finally:
                system.stop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}-memory.json"
    out.write_text(json.dumps({"soak": args.soak, "points": points}, indent=1))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()

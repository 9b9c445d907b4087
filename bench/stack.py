"""The ASGI server and upstream HTTP client behind the bare proxy (and llmrelay), compared on
one nginx (`python -m bench.run --compare-stack [--with-llmrelay]`; docs/performance.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.load import Driver
from bench.report import find_window, machine, print_table
from bench.systems import System, check_answers, start_bare, start_llmrelay
from bench.upstream import upstream


def compare_stack(
    folder: Path, modes: Sequence[str], quick: bool, with_llmrelay: bool
) -> dict[str, Any]:
    levels = [1, 64] if quick else [1, 64, 256]
    duration = 3.0 if quick else 10.0
    info = machine()
    systems: list[System] = []
    with upstream(folder, modes) as nginx:
        try:
            for server in ("uvicorn", "granian"):
                for client in ("aiohttp", "httpx", "httpx2"):
                    systems.append(start_bare(folder, nginx.port, modes, server, client))
            if with_llmrelay:
                for server in ("uvicorn", "granian"):
                    sub = folder / f"llmrelay-{server}"
                    systems.append(start_llmrelay(sub, nginx.port, modes, server=server))
            for system in systems:
                check_answers(system, modes)
            driver = Driver(folder, nginx)
            print("warm-up ...", flush=True)
            for system in systems:
                for mode in modes:
                    driver.window(system, mode, 64, 2, keep=False)
            print("measuring; the systems alternate window by window ...", flush=True)
            for mode in modes:
                for c in levels:
                    for system in systems:
                        driver.window(system, mode, c, duration)
            peaks = {s.name: s.peak_rss_kb() for s in systems}
        finally:
            for system in systems:
                system.stop()
    print()
    print_table(driver.windows)
    base = systems[0].name
    print(f"\nrelative to {base} (req/s, CPU/request; x = errors, figure not valid):")
    print(f"{'':<22}" + "".join(f" {f'{m} c={c}':>17}" for m in modes for c in levels))
    for system in systems:
        cells = []
        for mode in modes:
            for c in levels:
                b, w = (find_window(driver.windows, n, mode, c) for n in (base, system.name))
                if b is None or w is None or not b.rps or not b.cpu_us_per_req:
                    cells.append(f"{'-':>17}")
                    continue
                bad = "x" if w.errors else " "
                cells.append(
                    f" {w.rps / b.rps:>7.0%} {w.cpu_us_per_req / b.cpu_us_per_req:>6.2f}x{bad}"
                )
        print(f"{system.name:<22}" + "".join(cells))
    for system in systems:
        for mode, problem in system.problems.items():
            print(f"!! {system.name} {mode}: {problem}")
    return {
        "kind": "stack",
        "quick": quick,
        "machine": info,
        "modes": list(modes),
        "levels": levels,
        "window_s": duration,
        "windows": [asdict(w) for w in driver.windows],
        "cold_start_s": {s.name: s.cold_start_s for s in systems},
        "peak_rss_kb": peaks,
        "problems": {s.name: s.problems for s in systems},
        "errors": sum(w.errors for w in driver.windows),
    }

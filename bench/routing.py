"""Routing overhead: a virtual model with 8 routes under `least_time` against one with a
single route, on one llmrelay process (`python -m bench.run --routing [--quick]`).

The routing issue's target: routing must not cost the hot path, i.e. the 8-route model's
throughput is at least 0.95 of the 1-route model's. Both models use `least_time`, so both
pay for its latency bookkeeping (a clock read and an average update per call); what differs
is the ordering of 8 routes per call (the router hands a model's only route back at once).
The 8 routes lead to 8 providers (mock-MODE-r0..r7) on the same nginx location: distinct
routes with identical upstream latency and one shared connection pool, so least_time keeps
moving between them and any difference comes from the gateway, not the upstream.

Both models live in one process (the same warm state, database and caches) and their
windows alternate: in each round every cell (mode, concurrency) runs the two models back
to back, 1 then 8 in even rounds and 8 then 1 in odd ones, so drift hits both alike. The
report gives medians over the rounds and each round's own ratio, which shows the noise.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.load import Driver
from bench.report import Target, machine, paired, print_table
from bench.systems import System, check_answers, routed_mode, start_llmrelay
from bench.upstream import upstream

ROUTES = 8
ARMS = (1, ROUTES)  # routes of the two models compared
#: The modes measured unless --modes says otherwise: a JSON answer, and a stream that
#: arrives event by event like a real provider's.
ROUTING_MODES = ("plain", "sse-paced")
TARGET_PCT = 95.0  # many-route throughput as a share of one-route throughput


def compare_routing(folder: Path, modes: Sequence[str], quick: bool) -> dict[str, Any]:
    levels = [1, 64]
    duration = 3.0 if quick else 10.0
    rounds = 3 if quick else 5
    called = [routed_mode(m, n) for m in modes for n in ARMS]
    info = machine()  # now: the commit and source hash of the code about to be started
    relay: System | None = None
    with upstream(folder, modes) as nginx:
        try:
            print(f"starting llmrelay on core 1 with models {', '.join(called)} ...")
            relay = start_llmrelay(folder / "llmrelay", nginx.port, modes, routed=ARMS)
            check_answers(relay, called)
            driver = Driver(folder, nginx)
            # Also lets least_time measure every route before the windows (5 % of its calls
            # try an unmeasured route first).
            print("warm-up ...", flush=True)
            for mode in called:
                driver.window(relay, mode, 64, 2 if quick else 5, keep=False)
            print(
                f"measuring: {rounds} rounds; in each, the {ARMS[0]}- and {ARMS[1]}-route "
                "models back to back per mode and concurrency ...",
                flush=True,
            )
            for r in range(rounds):
                arms = ARMS if r % 2 == 0 else ARMS[::-1]
                print(f" round {r + 1} of {rounds}", flush=True)
                for mode in modes:
                    for c in levels:
                        for n in arms:
                            driver.window(relay, routed_mode(mode, n), c, duration)
            peak_kb = relay.peak_rss_kb()
            requests_total = relay.requests_total
            problems = dict(relay.problems)
        finally:
            if relay is not None:
                relay.stop()
    windows = driver.windows
    figures = paired(windows, modes, levels, ARMS, routed_mode)
    spread = routes_used(folder / "llmrelay" / "bench.db", [f"bench-{m}" for m in called])
    targets = [
        Target(
            f"{ARMS[1]}-route / 1-route req/s, {mode}, c={c}",
            v["throughput_ratio"] * 100,
            TARGET_PCT,
            "%",
            at_most=False,
            valid=v["valid"],
        )
        for mode, by_level in figures.items()
        for c, v in by_level.items()
    ]
    print()
    print_table(windows)
    one, many = (str(n) for n in ARMS)
    print(f"\n{many} routes against {one} (least_time both), medians of {rounds} rounds:")
    for mode, by_level in figures.items():
        for level, v in by_level.items():
            each = " ".join(f"{x:.3f}" for x in v["round_throughput_ratios"])
            rps, cpu = v["rps"], v["cpu_us_per_req"]
            print(
                f"  {mode:<9} c={level:<3} req/s {rps[one]:>7.0f} -> {rps[many]:>7.0f}"
                f"  x{v['throughput_ratio']:.3f} (rounds: {each})  CPU us/req "
                f"{cpu[one]:.0f} -> {cpu[many]:.0f}  x{v['cpu_ratio']:.3f}"
                + ("" if v["valid"] else "  (ERRORS)")
            )
    print("\nrequests recorded per model and provider (retried or failed over: attempts > 1):")
    for model, providers in spread.items():
        cells = ", ".join(f"{p} {n['requests']}" for p, n in providers.items())
        again = sum(n["attempts_over_1"] for n in providers.values())
        print(f"  {model}: {cells}; attempts > 1: {again}")
    for mode, problem in problems.items():
        print(f"!! llmrelay {mode}: {problem}")
    print("\ntargets:")
    for t in targets:
        print(t.line())
    errors = sum(w.errors for w in windows)
    if errors:
        print(f"\n!! {errors} bad answers in total: windows with errors are not valid figures")
    return {
        "kind": "routing",
        "quick": quick,
        "machine": info,
        "modes": list(modes),
        "levels": levels,
        "arms": list(ARMS),
        "rounds": rounds,
        "window_s": duration,
        "windows": [asdict(w) for w in windows],
        "figures": figures,
        "routes_used": spread,
        "peak_rss_kb": peak_kb,
        "requests_total": requests_total,
        "problems": problems,
        "targets": [{**asdict(t), "met": t.met} for t in targets],
        "all_targets_met": all(t.met for t in targets),
        "errors": errors,
    }


def routes_used(database: Path, models: Sequence[str]) -> dict[str, dict[str, dict[str, int]]]:
    """Recorded requests per model and provider: shows that least_time did spread the
    many-route model's calls, and that none needed a second attempt."""
    query = (
        "SELECT virtual_model, provider, count(*), sum(attempts > 1) FROM request_records "
        f"WHERE virtual_model IN ({', '.join('?' * len(models))}) GROUP BY 1, 2 ORDER BY 1, 2"
    )
    out: dict[str, dict[str, dict[str, int]]] = {}
    with contextlib.closing(sqlite3.connect(database)) as db:
        for model, provider, count, again in db.execute(query, list(models)):
            out.setdefault(str(model), {})[str(provider)] = {
                "requests": int(count),
                "attempts_over_1": int(again or 0),
            }
    return out


def markdown(data: dict[str, Any]) -> str:
    """The figures of a routing results file as a Markdown table (for docs/performance.md)."""
    one, many = (str(n) for n in data["arms"])
    out = [
        f"| mode | conc | 1 route req/s | {many} routes req/s | throughput ratio "
        "| ratio per round | 1 route CPU us/req | "
        f"{many} routes CPU us/req | CPU ratio | p50 ms 1 / {many} | bad answers |",
        "|" + " --- |" * 11,
    ]
    for mode, by_level in data["figures"].items():
        for c, v in by_level.items():
            each = ", ".join(f"{x:.2f}" for x in v["round_throughput_ratios"])
            bad = sum(v["bad_answers"].values())
            out.append(
                f"| {mode} | {c} | {v['rps'][one]:.0f} | {v['rps'][many]:.0f} "
                f"| {v['throughput_ratio']:.3f} | {each} | {v['cpu_us_per_req'][one]:.0f} "
                f"| {v['cpu_us_per_req'][many]:.0f} | {v['cpu_ratio']:.3f} "
                f"| {v['p50_ms'][one]:.2f} / {v['p50_ms'][many]:.2f} "
                f"| {bad} of {sum(v['requests'].values())} |"
            )
    return "\n".join(out)

"""llmrelay against a bare pass-through proxy, on the same nginx mock upstream, in one run.

    python -m bench.run                  # full run (about 9 minutes)
    python -m bench.run --quick          # 3 s windows, c=1, 8 and 64 only (about 6 minutes)
    python -m bench.run --compare-stack  # bare proxy: uvicorn|granian x aiohttp|httpx|httpx2
    python -m bench.run --compare-stack --with-llmrelay   # ... and llmrelay under both servers
    python -m bench.run --routing        # 8 routes (least_time) against 1 route, about 8 minutes
    python -m bench.run --translation    # chat from an anthropic upstream against an openai one
    python -m bench.run --agent          # a 50 kB Claude Code request translated to an openai
                                         # upstream against passed through to an anthropic one
    python -m bench.run --limits         # a limited key against an unlimited one, with and
                                         # without Redis (admission cost)
    python -m bench.run --instructions   # CPU instructions per request under callgrind (steady
                                         # on a busy machine: for comparing code)
    python -m bench.run --prepaid-rate   # one prepaid wallet at c=64 against unbilled (SQLite, PG)
    python -m bench.run --prepaid-rate --instructions   # the same under callgrind (SQLite)
    python -m bench.run --markdown bench/results/FILE.json  # a results file as Markdown tables

What runs (docs/performance.md explains the figures):
- nginx (Debian) as the upstream on core 0, next to wrk: `/plain/v1/chat/completions` answers a
  fixed chat.completion; `/sse/v1/...` a fixed SSE stream in one write ("burst");
  `/sse-paced/v1/...` the same events one write each, with 1 ms after the first content event
  (needs the Debian package libnginx-mod-http-echo; skipped without it);
  `/anthropic-plain/v1/messages` and `/anthropic-sse/v1/messages` the same answers as an
  Anthropic Message and event stream (for --translation);
- the bare proxy (bench/bare_proxy.py) and llmrelay (`llmrelay serve`, one worker, SQLite,
  auth and request recording on), both on core 1;
- wrk at several concurrencies per mode; a Lua script checks every answer (status 200 and a
  complete body: a JSON completion, or a stream that ends with `data: [DONE]` and carries no
  error event), so a flood of errors cannot pass for throughput.

Per window: requests/s, p50/p99 latency, the system's CPU seconds per request (utime + stime
of its process tree from /proc, including work it finishes right after the window, such as
batched record writes), and how busy each core was. JSON results go to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.agent import compare_agent
from bench.agent import markdown as agent_markdown
from bench.constants import ALL_MODES, ECHO_MODULE
from bench.instructions import count_instructions
from bench.instructions import markdown as instructions_markdown
from bench.limits import compare_limits
from bench.limits import markdown as limits_markdown
from bench.load import Driver, Window
from bench.prepaid_instructions import count_prepaid_instructions
from bench.prepaid_instructions import markdown as prepaid_instructions_markdown
from bench.prepaid_rate import bench_prepaid_rate, prepaid_rate_markdown
from bench.procs import settle
from bench.recording import compare_recording
from bench.recording import markdown as recording_markdown
from bench.report import (
    Target,
    machine,
    markdown,
    print_table,
    ratios,
    recorded_rows,
    save,
)
from bench.routing import ROUTING_MODES, compare_routing
from bench.routing import markdown as routing_markdown
from bench.stack import compare_stack
from bench.systems import System, check_answers, start_bare, start_llmrelay
from bench.translation import compare_translation
from bench.translation import markdown as translation_markdown
from bench.upstream import upstream
from bench.usage_api import bench_usage_api
from bench.usage_api import markdown as usage_markdown

#: Results kinds with their own table (the others: bench.report.markdown).
MARKDOWN = {
    "routing": routing_markdown,
    "translation": translation_markdown,
    "agent": agent_markdown,
    "limits": limits_markdown,
    "usage-api": usage_markdown,
    "recording": recording_markdown,
    "prepaid-rate": prepaid_rate_markdown,
    "prepaid-instructions": prepaid_instructions_markdown,
    "instructions": instructions_markdown,
}


def compare_llmrelay(
    folder: Path,
    modes: Sequence[str],
    quick: bool,
    rounds: int | None = None,
    levels: Sequence[int] | None = None,
) -> dict[str, Any]:
    levels = list(levels or ([1, 8, 64] if quick else [1, 8, 64, 256]))
    duration = 3.0 if quick else 6.0
    rounds = rounds or (2 if quick else 3)
    marks = (10_000, 30_000, 50_000) if quick else (10_000, 50_000, 100_000, 200_000)
    streams = [m for m in ("sse-paced", "sse") if m in modes]
    soak_modes = ["plain", *streams[:1]]
    info = machine()  # now: the commit and source hash of the code about to be started
    systems: list[System] = []
    soaks: list[Window] = []
    with upstream(folder, modes) as nginx:
        try:
            print("starting the bare proxy (uvicorn + aiohttp) and llmrelay on core 1 ...")
            bare = start_bare(folder, nginx.port, modes, "uvicorn", "aiohttp")
            relay = start_llmrelay(folder / "llmrelay", nginx.port, modes)
            systems += [bare, relay]
            print(
                f"  llmrelay cold start: fresh database {relay.cold_start_s} s, "
                f"restart {relay.restart_s} s",
                flush=True,
            )
            for system in systems:
                check_answers(system, modes)
            driver = Driver(folder, nginx)
            print(
                f"memory: llmrelay to {marks[-1]} requests, {' + '.join(soak_modes)}, "
                "each step 80 % at c=64 then 20 % at c=1 ..."
            )
            for mark in marks:
                # c=1 too: some leaks (one cached statement per batch size, say) show only
                # when requests trickle in one by one.
                busy = relay.requests_total + (mark - relay.requests_total) * 4 // 5
                for until, connections in ((busy, 64), (mark, 1)):
                    soak = driver.soak(relay, soak_modes, until, connections)
                    if soak is not None:
                        soaks.append(soak)
                settle(relay.pids())
                relay.rss_checkpoints[str(relay.requests_total)] = relay.rss_kb()
            print("warm-up of the bare proxy ...", flush=True)
            for mode in modes:
                driver.window(bare, mode, 64, 2, keep=False)
            print(
                f"measuring: {rounds} rounds; in each, bare and llmrelay back to back per mode "
                "and concurrency (the order turns each round) ...",
                flush=True,
            )
            for turn in range(rounds):
                print(f" round {turn + 1} of {rounds}", flush=True)
                order = systems if turn % 2 == 0 else systems[::-1]
                for mode in modes:
                    for c in levels:
                        for system in order:
                            driver.window(system, mode, c, duration)
            settle(relay.pids())
            rss_end = relay.rss_kb()
            peaks = {s.name: s.peak_rss_kb() for s in systems}
        finally:
            for system in systems:
                system.stop()
    rows = recorded_rows(folder / "llmrelay" / "bench.db")
    windows = driver.windows
    r = ratios(windows, modes, levels, bare.name, relay.name)
    checkpoints = list(relay.rss_checkpoints.items())
    (n_a, rss_a), (n_b, rss_b) = checkpoints[0], checkpoints[-1]
    targets = []
    for mode in modes:
        at64, at1 = r[mode].get("64", {}), r[mode].get("1", {})
        for level, cell in r[mode].items():
            # issue 36: CPU per request within 1.2 times the bare proxy's, in every cell
            targets.append(
                Target(
                    f"CPU/request vs bare, {mode}, c={level}",
                    cell.get("cpu_ratio", 0),
                    1.2,
                    "x",
                    at_most=True,
                    valid=cell.get("valid", False),
                )
            )
            if level in ("1", "8"):  # and a tail within 2x the bare proxy's + 0.5 ms
                targets.append(
                    Target(
                        f"p99 vs 2 x bare p99 + 0.5 ms, {mode}, c={level}",
                        cell["medians"]["p99_ms"][relay.name],
                        cell["p99_limit_ms"],
                        "ms",
                        at_most=True,
                        valid=cell.get("valid", False),
                    )
                )
        if at64:
            targets.append(
                Target(
                    f"throughput vs bare, {mode}, c=64",
                    at64.get("throughput_pct", 0),
                    70,
                    "%",
                    at_most=False,
                    valid=at64.get("valid", False),
                )
            )
        if at1:
            targets.append(
                Target(
                    f"added p50 latency, {mode}, c=1",
                    at1.get("added_p50_ms", 0),
                    0.5,
                    "ms",
                    at_most=True,
                    valid=at1.get("valid", False),
                )
            )
    soak_errors = sum(w.errors for w in soaks)
    targets += [
        Target("peak RSS (VmHWM)", peaks[relay.name] / 1024, 100, "MiB", True),
        Target(
            f"RSS growth {int(n_a) // 1000}k -> {int(n_b) // 1000}k requests",
            (rss_b - rss_a) / rss_a * 100,
            10,
            "%",
            at_most=True,
            note=f"{soak_errors} bad answers during the soak" if soak_errors else "",
        ),
        Target(
            f"cold start, fresh database (worst of {len(relay.cold_start_s)})",
            max(relay.cold_start_s),
            3,
            "s",
            True,
            strict=True,
        ),
        Target("cold start, restart", max(relay.restart_s), 3, "s", True, strict=True),
        # Every answered request has its record (a few more rows than wrk counted is normal:
        # requests in flight when a window ends are answered and recorded, not counted).
        Target("request records missing", max(0, relay.requests_total - rows), 0, "", True),
    ]
    print()
    print_table(windows)
    print(f"\nllmrelay vs bare (same server, client and upstream), medians of {rounds} rounds:")
    for mode in modes:
        for level, v in r[mode].items():
            each = " ".join(f"{x:.2f}" for x in v["round_cpu_ratios"])
            p99, top = v["medians"]["p99_ms"], v["medians"]["max_ms"]
            print(
                f"  {mode:<10} c={level:<4} CPU/req x{v['cpu_ratio']:<5} (rounds {each}) "
                f"throughput {v['throughput_pct']:>5.1f}%  added p50 {v['added_p50_ms']:+.2f} ms"
                f"  p99 {p99[bare.name]:.2f} / {p99[relay.name]:.2f} ms (limit "
                f"{v['p99_limit_ms']:.2f})  max {top[bare.name]:.1f} / {top[relay.name]:.1f} ms"
                f"{'' if v['valid'] else '  (ERRORS)'}"
            )
    rss_line = ", ".join(f"{int(kb) / 1024:.1f} MB after {n}" for n, kb in checkpoints)
    print(
        f"\nllmrelay RSS (soak, c=64): {rss_line}; after the windows above "
        f"{rss_end / 1024:.1f} MB; peak {peaks[relay.name] / 1024:.1f} MB "
        f"(bare proxy peak {peaks[bare.name] / 1024:.1f} MB)"
    )
    print(f"request records written by llmrelay: {rows} for {relay.requests_total} requests")
    for system in systems:
        for mode, problem in system.problems.items():
            print(f"!! {system.name} {mode}: {problem}")
    print("\ntargets:")
    for t in targets:
        print(t.line())
    errors = sum(w.errors for w in windows) + soak_errors
    if errors:
        print(f"\n!! {errors} bad answers in total: windows with errors are not valid figures")
    return {
        "kind": "compare",
        "quick": quick,
        "machine": info,
        "modes": list(modes),
        "levels": levels,
        "window_s": duration,
        "rounds": rounds,
        "windows": [asdict(w) for w in windows],
        "soak": [asdict(w) for w in soaks],
        "ratios": r,
        "cold_start_s": {
            s.name: {"fresh": s.cold_start_s, "restart": s.restart_s} for s in systems
        },
        "rss_kb": {
            "llmrelay_soak_by_requests": relay.rss_checkpoints,
            "llmrelay_after_windows": rss_end,
            "peak": peaks,
        },
        "requests_total": {s.name: s.requests_total for s in systems},
        "records_written": rows,
        "problems": {s.name: s.problems for s in systems},
        "targets": [{**asdict(t), "met": t.met} for t in targets],
        "errors": errors,
    }


def preflight() -> list[str]:
    """The modes this machine can run; exits when a tool is missing."""
    os.environ["PATH"] = f"{os.environ.get('PATH', '')}:/usr/sbin"
    missing = [tool for tool in ("nginx", "wrk", "taskset") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"missing: {', '.join(missing)} (apt-get install -y nginx wrk)")
    if not {0, 1} <= os.sched_getaffinity(0):
        sys.exit("needs cores 0 and 1: core 0 for nginx + wrk, core 1 for the system under test")
    if ECHO_MODULE.exists():
        return list(ALL_MODES)
    print(f"note: {ECHO_MODULE} missing (apt-get install -y libnginx-mod-http-echo): no sse-paced")
    return [mode for mode in ALL_MODES if mode != "sse-paced"]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # run the finally blocks: stop nginx and the servers


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description="llmrelay against a bare pass-through proxy")
    parser.add_argument("--quick", action="store_true", help="3 s windows, c=1, 8 and 64 only")
    parser.add_argument(
        "--levels", help="the comparison: comma-separated concurrencies (default 1,8,64,256)"
    )
    parser.add_argument(
        "--compare-stack",
        action="store_true",
        help="bare proxy: uvicorn|granian x aiohttp|httpx|httpx2",
    )
    parser.add_argument(
        "--with-llmrelay", action="store_true", help="--compare-stack: llmrelay under both too"
    )
    parser.add_argument(
        "--routing",
        action="store_true",
        help="llmrelay alone: a virtual model with 8 routes (least_time) against 1 route",
    )
    parser.add_argument(
        "--translation",
        action="store_true",
        help="llmrelay alone: chat clients from an anthropic upstream against an openai one",
    )
    parser.add_argument(
        "--agent",
        action="store_true",
        help="llmrelay alone: a 50 kB Claude Code request translated to an openai upstream "
        "against passed through to an anthropic one (CPU per request)",
    )
    parser.add_argument(
        "--limits",
        action="store_true",
        help="llmrelay alone: a key with limits against one without, in process, with Redis "
        "and on PostgreSQL (alone and shared)",
    )
    parser.add_argument(
        "--limiters",
        help="--limits: only these comma-separated processes (in-process, redis, pg-alone, "
        "pg-shared)",
    )
    parser.add_argument(
        "--recording",
        action="store_true",
        help="llmrelay with request records against llmrelay without (LLMRELAY_RECORD_REQUESTS)",
    )
    parser.add_argument(
        "--usage-api",
        action="store_true",
        help="the usage API over --rows synthetic records, on PostgreSQL and SQLite",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="CPU instructions per request under callgrind: bare, llmrelay, limited keys",
    )
    parser.add_argument(
        "--cells",
        help="--instructions: only these comma-separated MODE:ARM counts (MODE plain or sse;"
        " ARM bare, off, all, key or anthropic), e.g. sse:off,sse:anthropic",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="rounds (the medians' sample) for the comparison, --translation and --limits: more"
        " rounds of the same windows when the machine is noisy",
    )
    parser.add_argument(
        "--prepaid",
        action="store_true",
        help="prepaid billing: its transactions, and a request prepaid against not (SQLite, PG)",
    )
    parser.add_argument(
        "--prepaid-rate",
        action="store_true",
        help="one prepaid wallet under wrk at c=64 against the same key unbilled, in one run"
        " (SQLite; PostgreSQL + Redis): req/s, CPU per request, settle backlog; with"
        " --instructions: instructions per request under callgrind (SQLite)",
    )
    parser.add_argument("--rows", type=int, default=2_000_000, help="--usage-api: records")
    parser.add_argument(
        "--modes", help=f"comma-separated subset of {','.join(ALL_MODES)} (not --translation)"
    )
    parser.add_argument("--keep-temp", action="store_true", help="keep the temp folder (logs)")
    parser.add_argument("--markdown", type=Path, help="print a results file as Markdown, then exit")
    args = parser.parse_args()
    if args.markdown:
        data = json.loads(args.markdown.read_text())
        render = MARKDOWN.get(data["kind"])
        print(render(data) if render else markdown(args.markdown))
        return
    if args.usage_api:
        folder = Path(tempfile.mkdtemp(prefix="llmrelay-bench-"))
        try:
            data = bench_usage_api(folder, args.rows)
            data["kind"] = "usage-api"
            print(usage_markdown(data))
            print(f"\nresults: {save('usage-api', data)}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    if args.prepaid:
        from bench.prepaid import bench_prepaid, prepaid_markdown

        folder = Path(tempfile.mkdtemp(prefix="llmrelay-bench-"))
        try:
            data = bench_prepaid(folder)
            data["kind"] = "prepaid"
            print(prepaid_markdown(data))
            print(f"\nresults: {save('prepaid', data)}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    if args.agent:  # its own load generator (bench.agent_load): no wrk needed
        folder = Path(tempfile.mkdtemp(prefix="llmrelay-bench-"))
        try:
            data = compare_agent(folder, args.quick, args.rounds)
            print("\n" + agent_markdown(data))
            print(f"\nresults: {save('agent-quick' if args.quick else 'agent', data)}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    modes = preflight()
    if args.routing and not args.modes:
        modes = [m for m in modes if m in ROUTING_MODES]
    if args.modes:
        modes = [m for m in args.modes.split(",") if m in modes]
        if "plain" not in modes:
            modes.insert(0, "plain")  # readiness and the soak need it
    folder = Path(tempfile.mkdtemp(prefix="llmrelay-bench-"))
    try:
        if args.compare_stack:
            data = compare_stack(folder, modes, args.quick, args.with_llmrelay)
            kind = "stack-quick" if args.quick else "stack"
        elif args.routing:
            data = compare_routing(folder, modes, args.quick)
            kind = "routing-quick" if args.quick else "routing"
        elif args.limits:
            limiters = args.limiters.split(",") if args.limiters else None
            data = compare_limits(folder, args.quick, args.rounds, limiters)
            kind = "limits-quick" if args.quick else "limits"
        elif args.prepaid_rate and args.instructions:
            data = count_prepaid_instructions(folder, 6.0 if args.quick else 20.0)
            print("\n" + prepaid_instructions_markdown(data))
            kind = "prepaid-instructions"
        elif args.instructions:
            cells = frozenset(args.cells.split(",")) if args.cells else None
            data = count_instructions(folder, 6.0 if args.quick else 12.0, cells)
            kind = "instructions"
        elif args.prepaid_rate:
            data = bench_prepaid_rate(folder)
            print("\n" + prepaid_rate_markdown(data))
            kind = "prepaid-rate"
        elif args.recording:
            data = compare_recording(folder, args.quick)
            kind = "recording-quick" if args.quick else "recording"
        elif args.translation:
            data = compare_translation(folder, args.quick, args.rounds)
            kind = "translation-quick" if args.quick else "translation"
        else:
            levels = [int(c) for c in args.levels.split(",")] if args.levels else None
            data = compare_llmrelay(folder, modes, args.quick, args.rounds, levels)
            kind = "compare-quick" if args.quick else "compare"
        print(f"\nresults: {save(kind, data)}")
    finally:
        if args.keep_temp:
            print(f"temp folder kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

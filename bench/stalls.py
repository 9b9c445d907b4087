"""What stalls llmrelay's event loop under steady load, and why (a diagnostic, not a test).

    python -m bench.stalls                          # asyncio loop, every callback timed
    python -m bench.stalls --loop uvloop            # as shipped: a watchdog samples stacks
    python -m bench.stalls --levels 1,8 --seconds 20 --modes plain,sse --idle-s 10

nginx (bench.upstream) and wrk on core 0, one `llmrelay serve` (SQLite, records on) on core 1
run by bench/stall_probe.py, which times the loop's work and every garbage collection. First
an idle window (no requests: what the periodic work alone does), then one wrk window per mode
and concurrency. For each window: wrk's latency figures, every stall longer than the threshold
(0.5 ms) grouped by its cause, and the GC pauses. With `--loop asyncio` a stall is one
callback of the loop that ran too long (a request's step included); with `--loop uvloop` it
is a wait of the watchdog's marker, named by the stack the watchdog saw most while it waited.
With asyncio a callback is judged by its CPU time (the thread's own clock), so that another
process taking core 1 for a moment, on a shared machine, does not count as a stall of
llmrelay's (`--wall` to judge by wall time); GC pauses are CPU times too.
Results go to bench/results/<time>-stalls.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from bench.constants import SUT_CORE
from bench.load import run_wrk, write_lua
from bench.procs import free_port, http_get, stop_process
from bench.report import machine, save
from bench.systems import llmrelay_config
from bench.upstream import answer_object, request_body, upstream


@dataclass
class Span:
    name: str
    started: float
    ended: float
    wrk: dict[str, Any] = field(default_factory=dict)


def _start(folder: Path, port: int, nginx_port: int, modes: list[str], args: Any) -> Any:
    config = folder / "llmrelay.yaml"
    config.write_text(llmrelay_config(nginx_port, modes))
    env = {**os.environ, "LLMRELAY_DATABASE_URL": f"sqlite:///{folder / 'bench.db'}"}
    probe = [
        *(sys.executable, "-m", "bench.stall_probe", "--out", str(folder / "events.json")),
        *("--loop", args.loop, "--threshold-ms", str(args.threshold_ms)),
        *(("--wall",) if args.wall else ()),
        *(("--gc-threshold", args.gc_threshold) if args.gc_threshold else ()),
        *(("--no-gc-freeze",) if args.no_gc_freeze else ()),
        "--",
        *("serve", "--config", str(config), "--port", str(port)),
    ]
    process = subprocess.Popen(
        ["taskset", "-c", SUT_CORE, *probe],
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
        stdout=(folder / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if http_get(port, "/readyz", timeout_s=2.0) == 200:
                return process
        except OSError:
            pass
        time.sleep(0.1)
    stop_process(process)
    raise RuntimeError(f"serve did not get ready: {(folder / 'serve.log').read_text()[-3000:]}")


def _group(stalls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by: dict[str, list[float]] = defaultdict(list)
    for stall in stalls:
        by[stall["cause"]].append(stall.get("cpu_ms", stall["ms"]))
    rows = [
        {
            "cause": cause,
            "count": len(ms),
            "max_ms": round(max(ms), 2),
            "median_ms": round(median(ms), 2),
            "total_ms": round(sum(ms), 1),
        }
        for cause, ms in by.items()
    ]
    return sorted(rows, key=lambda r: -r["total_ms"])


def _gc_summary(pauses: list[list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for generation in (0, 1, 2):
        ms = [p[1] * 1000 for p in pauses if p[2] == generation]
        if ms:
            out[f"gen{generation}"] = {
                "count": len(ms),
                "max_ms": round(max(ms), 3),
                "median_ms": round(median(ms), 3),
                "over_threshold": 0,
                "total_ms": round(sum(ms), 1),
            }
    return out


def analyse(events: dict[str, Any], spans: list[Span]) -> list[dict[str, Any]]:
    threshold_ms = events["threshold_s"] * 1000
    report = []
    for span in spans:
        stalls = [s for s in events["stalls"] if span.started <= s["at"] < span.ended]
        pauses = [p for p in events["gc"] if span.started <= p[0] < span.ended]
        gc = _gc_summary(pauses)
        for generation, summary in gc.items():
            summary["over_threshold"] = sum(
                1 for p in pauses if f"gen{p[2]}" == generation and p[1] * 1000 > threshold_ms
            )
        seconds = span.ended - span.started
        during_gc = 0
        for stall in stalls:
            end = stall["at"] + stall["ms"] / 1000
            if any(p[0] < end and p[0] + p[1] > stall["at"] for p in pauses):
                during_gc += 1
                stall["cause"] += " [+gc]"
        slices = {}
        for kind, seen in events.get("slices", {}).items():
            ms = sorted(cpu * 1000 for at, cpu in seen if span.started <= at < span.ended)
            if ms:
                slices[kind] = {
                    "count": len(ms),
                    "median_ms": round(ms[len(ms) // 2], 3),
                    "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3),
                    "max_ms": round(ms[-1], 3),
                    "over_threshold": sum(1 for x in ms if x > threshold_ms),
                }
        report.append(
            {
                "window": span.name,
                "slices": dict(sorted(slices.items(), key=lambda kv: -kv[1]["max_ms"])),
                "seconds": round(seconds, 1),
                "wrk": span.wrk,
                "stalls": len(stalls),
                "stalls_per_s": round(len(stalls) / seconds, 2) if seconds else 0.0,
                "stalls_with_gc": during_gc,
                "max_ms": round(max((s.get("cpu_ms", s["ms"]) for s in stalls), default=0.0), 2),
                "by_cause": _group(stalls),
                "gc": gc,
            }
        )
    return report


def print_report(report: list[dict[str, Any]], threshold_ms: float, top: int) -> None:
    for window in report:
        wrk = window["wrk"]
        head = f"\n== {window['window']} ({window['seconds']} s)"
        if wrk:
            head += (
                f": {wrk['requests']} requests, p50 {wrk['lat_p50_us'] / 1000:.2f} ms, "
                f"p99 {wrk['lat_p99_us'] / 1000:.2f} ms, max {wrk['lat_max_us'] / 1000:.2f} ms"
            )
        print(head)
        print(
            f"   stalls over {threshold_ms:g} ms: {window['stalls']} "
            f"({window['stalls_per_s']}/s, longest {window['max_ms']} ms, "
            f"{window['stalls_with_gc']} during a GC)"
        )
        for row in window["by_cause"][:top]:
            print(
                f"   {row['count']:>6} x  max {row['max_ms']:>6.2f}  "
                f"median {row['median_ms']:>5.2f}  total {row['total_ms']:>8.1f} ms  "
                f"{row['cause'][:150]}"
            )
        if window.get("slices"):
            print("   every callback's CPU by kind (count, median, p99, max ms, over threshold):")
            for kind, v in list(window["slices"].items())[:top]:
                print(
                    f"   {v['count']:>7}  {v['median_ms']:6.3f}  {v['p99_ms']:6.3f}  "
                    f"{v['max_ms']:6.2f}  {v['over_threshold']:>5}  {kind[:90]}"
                )
        for generation, g in window["gc"].items():
            print(
                f"   GC {generation}: {g['count']} collections, max {g['max_ms']} ms, median "
                f"{g['median_ms']} ms, {g['over_threshold']} over {threshold_ms:g} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--levels", default="1,8")
    parser.add_argument("--modes", default="plain")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--threshold-ms", type=float, default=0.5)
    parser.add_argument(
        "--wall", action="store_true", help="asyncio: judge callbacks by wall, not CPU, time"
    )
    parser.add_argument("--gc-threshold", help="G0,G1,G2 instead of llmrelay's own settings")
    parser.add_argument("--no-gc-freeze", action="store_true", help="no gc.freeze() at start")
    parser.add_argument("--top", type=int, default=12, help="causes shown per window")
    parser.add_argument("--keep-temp", action="store_true")
    args = parser.parse_args()
    os.environ["PATH"] = f"{os.environ.get('PATH', '')}:/usr/sbin"
    modes = args.modes.split(",")
    levels = [int(c) for c in args.levels.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="llmrelay-stalls-"))
    spans: list[Span] = []
    try:
        with upstream(folder, modes) as nginx:
            port = free_port()
            process = _start(folder, port, nginx.port, modes, args)
            try:
                time.sleep(2.0)  # start-up work (the first job round, rollups) passes
                started = time.monotonic()
                time.sleep(args.idle_s)
                spans.append(Span("idle", started, time.monotonic()))
                for mode in modes:
                    path = "/v1/embeddings" if mode == "embeddings" else "/v1/chat/completions"
                    script = write_lua(
                        folder, path, request_body(mode), 0, (), answer=answer_object(mode)
                    )
                    run_wrk(port, script, 8, 2.0)  # warm-up
                    for c in levels:
                        started = time.monotonic()
                        result = run_wrk(port, script, c, args.seconds)
                        spans.append(Span(f"{mode} c={c}", started, time.monotonic(), result))
                        print(f"  {spans[-1].name}: {result['requests']} requests", flush=True)
            finally:
                stop_process(process)
        events = json.loads((folder / "events.json").read_text())
    finally:
        if args.keep_temp:
            print(f"temp folder kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    report = analyse(events, spans)
    print(
        f"loop {events['loop']}: {events['callbacks']} callbacks"
        + (" timed" if events["loop"] == "asyncio" else " (watchdog markers)")
        + ("; stall times are CPU times" if events.get("by_cpu") else "; stall times are wall")
    )
    print_report(report, args.threshold_ms, args.top)
    data = {
        "kind": "stalls",
        "machine": machine(),
        "loop": args.loop,
        "threshold_ms": args.threshold_ms,
        "windows": report,
        "spans": [asdict(s) for s in spans],
    }
    print(f"\nresults: {save('stalls', data)}")


if __name__ == "__main__":
    main()

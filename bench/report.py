"""What a run reports: the machine, tables, ratios against the bare proxy or between two arms,
targets, files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from statistics import median
from typing import Any, TypeVar

from bench.constants import FOREIGN_LIMIT, LOADGEN_CORE, PROJECT, RESULTS, SUT_CORE
from bench.load import Window


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=PROJECT)
    except OSError:
        return ""
    return (done.stdout + done.stderr).strip()


def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    versions = {}
    for package in (
        "llmrelay", "uvicorn", "uvloop", "httptools", "granian", "aiohttp", "httpx",
        "starlette", "orjson",
    ):  # fmt: skip
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)
    source = hashlib.sha256()
    for path in sorted((PROJECT / "src").rglob("*.py")):
        source.update(path.read_bytes())
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gb": round(int(Path("/proc/meminfo").read_text().split()[1]) / 1024**2, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": versions,
        "nginx": _run(["nginx", "-v"]).removeprefix("nginx version: "),
        "wrk": _run(["wrk", "--version"]).splitlines()[0:1],
        "git_commit": _run(["git", "rev-parse", "--short", "HEAD"]),
        "src_changed_since_commit": bool(_run(["git", "status", "--porcelain", "src"])),
        "src_sha256": source.hexdigest()[:16],
        "loadgen_core": LOADGEN_CORE,
        "sut_core": SUT_CORE,
    }


def print_table(windows: Sequence[Window]) -> None:
    header = (
        f"{'system':<22} {'mode':<10} {'conc':>5} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} "
        f"{'CPU us/req':>10} {'core1':>6} {'core0':>6} {'errors':>7} {'RSS MB':>7}"
    )
    print(header)
    print("-" * len(header))
    for w in windows:
        print(
            f"{w.system:<22} {w.mode:<10} {w.connections:>5} {w.rps:>8.0f} {w.p50_ms:>8.2f} "
            f"{w.p99_ms:>8.2f} {w.max_ms:>8.2f} {w.cpu_us_per_req:>10.0f} {w.sut_core_util:>6.0%} "
            f"{w.loadgen_core_util:>6.0%} {w.errors:>7} {w.rss_kb / 1024:>7.1f}"
            + (f"  other load on core {SUT_CORE}" if w.core1_foreign_util > FOREIGN_LIMIT else "")
        )


def find_window(
    windows: Sequence[Window], system: str, mode: str, connections: int
) -> Window | None:
    for w in windows:
        if (w.system, w.mode, w.connections) == (system, mode, connections):
            return w
    return None


def ratios(
    windows: Sequence[Window], modes: Sequence[str], levels: Sequence[int], base: str, sut: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """llmrelay (`sut`) against the bare proxy (`base`), measured in rounds (bench.run):
    per mode and concurrency the ratios of the medians, and each round's own CPU ratio (its
    two windows ran back to back), whose spread says how far one figure can be trusted."""
    figures = paired(windows, modes, levels, (base, sut), _same_mode, by_system=True)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for mode, by_level in figures.items():
        out[mode] = {}
        for c, v in by_level.items():
            out[mode][c] = {
                "cpu_ratio": round(v["cpu_ratio"], 2),
                "throughput_pct": round(100 * v["throughput_ratio"], 1),
                "added_p50_ms": round(v["p50_ms"][sut] - v["p50_ms"][base], 3),
                "added_p99_ms": round(v["p99_ms"][sut] - v["p99_ms"][base], 3),
                # issue 36: a tail within twice the bare proxy's plus half a millisecond
                "p99_limit_ms": round(2 * v["p99_ms"][base] + 0.5, 3),
                "round_cpu_ratios": v["round_cpu_ratios"],
                "round_throughput_ratios": v["round_throughput_ratios"],
                "medians": {
                    k: v[k] for k in ("rps", "cpu_us_per_req", "p50_ms", "p99_ms", "max_ms")
                },
                "valid": v["valid"],
            }
    return out


def _same_mode(mode: str, arm: str) -> str:
    return mode


Arm = TypeVar("Arm")


def paired(
    windows: Sequence[Window],
    modes: Sequence[str],
    levels: Sequence[int],
    arms: tuple[Arm, Arm],
    label: Callable[[str, Arm], str],
    *,
    by_system: bool = False,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Two arms measured in rounds, their windows back to back in each (bench.routing,
    bench.translation, bench.run); `label(mode, arm)` is an arm's mode, and with
    `by_system` an arm is also a system's name (two processes). Per mode and concurrency:
    medians per arm (keyed by str(arm)), their ratios (second arm over first) and each
    round's ratio (the two windows of a round ran back to back)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    base, other = (str(a) for a in arms)
    for mode in modes:
        out[mode] = {}
        for c in levels:
            runs = {
                str(a): [
                    w
                    for w in windows
                    if w.mode == label(mode, a)
                    and w.connections == c
                    and (not by_system or w.system == str(a))
                ]
                for a in arms
            }
            first, second = runs[base], runs[other]
            if not first or not second:
                continue
            pairs = list(zip(first, second, strict=True))  # one per round
            rps, cpu = _medians(runs, "rps"), _medians(runs, "cpu_us_per_req")
            out[mode][str(c)] = {
                "rps": rps,
                "cpu_us_per_req": cpu,
                "p50_ms": _medians(runs, "p50_ms"),
                "p99_ms": _medians(runs, "p99_ms"),
                "max_ms": _medians(runs, "max_ms"),
                "throughput_ratio": _ratio(rps[other], rps[base]),
                "cpu_ratio": _ratio(cpu[other], cpu[base]),
                "round_throughput_ratios": [_ratio(b.rps, a.rps) for a, b in pairs],
                "round_cpu_ratios": [_ratio(b.cpu_us_per_req, a.cpu_us_per_req) for a, b in pairs],
                "requests": {a: sum(w.requests for w in ws) for a, ws in runs.items()},
                "bad_answers": {a: sum(w.errors for w in ws) for a, ws in runs.items()},
                "valid": all(w.errors == 0 for w in first + second),
            }
    return out


def _medians(runs: dict[str, list[Window]], field: str) -> dict[str, float]:
    return {a: round(median(getattr(w, field) for w in ws), 3) for a, ws in runs.items()}


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


@dataclass
class Target:
    name: str
    value: float
    limit: float
    unit: str
    at_most: bool  # value must be <= limit (< when strict); else >= limit
    strict: bool = False
    valid: bool = True  # False when the windows behind it had errors
    note: str = ""

    @property
    def met(self) -> bool:
        if not self.valid:
            return False
        if self.at_most:
            return self.value < self.limit if self.strict else self.value <= self.limit
        return self.value >= self.limit

    def line(self) -> str:
        op = ("<" if self.strict else "<=") if self.at_most else ">="
        state = "MET" if self.met else "NOT MET"
        if not self.valid:
            state += " (errors: figure not valid)"
        if self.note:
            state += f" ({self.note})"
        return (
            f"  {self.name:<42} {self.value:>8.2f} {self.unit:<2}  target {op} "
            f"{self.limit:g} {self.unit:<2}  {state}"
        )


def markdown(path: Path) -> str:
    """Markdown tables of a results file (for docs/performance.md)."""
    data = json.loads(path.read_text())
    windows = [Window(**w) for w in data["windows"]]
    out = []
    if data["kind"] == "compare":
        return _compare_markdown(data, windows)
    names = list(dict.fromkeys(w.system for w in windows))
    for mode in data["modes"]:
        out.append(f"\n{mode}: req/s, CPU us/request (p50 ms)\n")
        out.append("| system | " + " | ".join(f"c={c}" for c in data["levels"]) + " |")
        out.append("|" + " --- |" * (1 + len(data["levels"])))
        for name in names:
            cells = []
            for c in data["levels"]:
                w = find_window(windows, name, mode, c)
                bad = f", {w.errors} bad" if w and w.errors else ""
                cells.append(
                    f"{w.rps:.0f}, {w.cpu_us_per_req:.0f} us ({w.p50_ms:.2f}{bad})" if w else "-"
                )
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def save(kind: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def recorded_rows(database: Path) -> int:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return int(db.execute("SELECT count(*) FROM request_records").fetchone()[0])


def _compare_markdown(data: dict[str, Any], windows: Sequence[Window]) -> str:
    """Medians over the rounds (and the spread of the rounds' CPU ratios) when the run had
    rounds; a single window per cell in results files from before."""
    out = [
        "| mode | conc | bare req/s | llmrelay req/s | llmrelay/bare | bare p50 / p99 / max ms "
        "| llmrelay p50 / p99 / max ms | p99 limit ms | bare CPU us/req | llmrelay CPU us/req "
        "| CPU ratio | CPU ratio by round | llmrelay bad answers |",
        "|" + " --- |" * 13,
    ]
    bare, relay = "bare-uvicorn-aiohttp", "llmrelay"
    for mode in data["modes"]:
        for c in data["levels"]:
            cell = data["ratios"].get(mode, {}).get(str(c))
            mine = [w for w in windows if (w.mode, w.connections) == (mode, c)]
            if cell is None or not mine:
                continue
            medians = cell.get("medians")
            if medians is None:  # one window per cell
                b, r = find_window(mine, bare, mode, c), find_window(mine, relay, mode, c)
                assert b is not None and r is not None
                medians = {
                    k: {bare: getattr(b, k), relay: getattr(r, k)}
                    for k in ("rps", "cpu_us_per_req", "p50_ms", "p99_ms", "max_ms")
                }
            rps, cpu = medians["rps"], medians["cpu_us_per_req"]
            p50, p99 = medians["p50_ms"], medians["p99_ms"]
            top = medians.get("max_ms", {bare: 0.0, relay: 0.0})
            limit = 2 * p99[bare] + 0.5
            rounds = " ".join(f"{x:.2f}" for x in cell.get("round_cpu_ratios", []))
            bad = sum(w.errors for w in mine if w.system == relay)
            asked = sum(w.requests for w in mine if w.system == relay)
            out.append(
                f"| {mode} | {c} | {rps[bare]:.0f} | {rps[relay]:.0f} "
                f"| {rps[relay] / rps[bare]:.0%} "
                f"| {p50[bare]:.2f} / {p99[bare]:.2f} / {top[bare]:.1f} "
                f"| {p50[relay]:.2f} / {p99[relay]:.2f} / {top[relay]:.1f} | {limit:.2f} "
                f"| {cpu[bare]:.0f} | {cpu[relay]:.0f} "
                f"| {cpu[relay] / cpu[bare]:.2f} | {rounds or '-'} | {bad} of {asked} |"
            )
    return "\n".join(out)

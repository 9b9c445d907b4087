"""Prepaid at data-plane speed (issue 32 item 4): ONE wallet under wrk at c=64, side by side
with the same key unbilled, in one run (`python -m bench.run --prepaid-rate`).

One `llmrelay serve` per backend on core 1 (SQLite in process; PostgreSQL with Redis), the
bench's nginx upstream and wrk on core 0, the bench config's `plain` model (priced). The
default tenant's wallet is turned prepaid and back between windows (alternating order per
round), so both arms are the same process, key and request. The gateway mints the request
ids, so every prepaid request is admitted against the wallet's lease (billing/allowance.py).

Per prepaid window it also reads whether the settles kept up: the reservation rows written
by the window's end (`backlog`: served but not yet settled) and the seconds until every
served request was settled (`drain_s`). The window's CPU includes what the process spent
until it went idle after wrk stopped (bench/load.py), so the lease writer's work counts.

Targets (the issue's): at least 2,000 requests/s through the wallet on PostgreSQL + Redis and
1,000 on SQLite; CPU per prepaid request at most 1.25x an unbilled one; no growing backlog.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.support.billing import BillingDb

from bench.load import Driver, Window
from bench.prepaid import ADMIN, _set_prepaid
from bench.report import machine
from bench.systems import System, start_llmrelay
from bench.upstream import answer_fragments, upstream

MODE = "plain"
CONNECTIONS = 64
ROUNDS = int(os.environ.get("BENCH_PREPAID_ROUNDS", "3"))
WINDOW_S = float(os.environ.get("BENCH_PREPAID_WINDOW_S", "8"))
#: The longest the settles of one window may take to be written after it.
DRAIN_CEILING_S = 60.0
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
TARGET_RPS = {"sqlite": 1000.0, "postgresql": 2000.0}
TARGET_CPU_RATIO = 1.25


def _settled(db: BillingDb, tenant: str) -> int:
    rows = db.rows(
        "SELECT count(*) AS n FROM reservations WHERE tenant_id = $1 AND status = 'settled'",
        tenant,
    )
    return int(rows[0]["n"])


def _drain(db: BillingDb, tenant: str, want: int) -> tuple[int, float]:
    """(settles missing when the window ended, seconds until none was)."""
    started = time.monotonic()
    backlog = want - _settled(db, tenant)
    while _settled(db, tenant) < want:
        if time.monotonic() - started > DRAIN_CEILING_S:
            return backlog, float("inf")
        time.sleep(0.05)
    return backlog, round(time.monotonic() - started, 2)


def _backend(folder: Path, nginx_port: int, backend: str, nginx: Any) -> dict[str, Any]:
    from tests.support.databases import create_postgres_database, drop_postgres_database

    env = {"LLMRELAY_ADMIN_TOKEN": ADMIN, "LLMRELAY_SNAPSHOT_POLL_S": "0.2"}
    url = f"sqlite:///{folder / backend / 'bench.db'}"
    if backend == "postgresql":
        url = asyncio.run(create_postgres_database())
        env |= {"LLMRELAY_DATABASE_URL": url, "LLMRELAY_REDIS_URL": REDIS_URL}
        migrate = [sys.executable, "-m", "llmrelay", "migrate"]
        subprocess.run(migrate, env={**os.environ, **env}, check=True)
    system: System | None = None
    try:
        system = start_llmrelay(folder / backend, nginx_port, [MODE], env=env, name=backend)
        base = f"http://127.0.0.1:{system.port}"
        db = BillingDb(url)
        tenant = db.default_tenant()
        driver = Driver(folder, nginx)
        driver.window(system, MODE, CONNECTIONS, 3, keep=False)  # warm
        windows: dict[str, list[Window]] = {"off": [], "prepaid": []}
        drains: list[dict[str, float]] = []
        for n in range(ROUNDS):
            for arm in ("off", "prepaid") if n % 2 == 0 else ("prepaid", "off"):
                print(f" {backend} round {n + 1}: {arm}", flush=True)
                _set_prepaid(base, arm == "prepaid")
                before = _settled(db, tenant)
                w = driver.window(
                    system, MODE, CONNECTIONS, WINDOW_S, expect=answer_fragments(MODE)
                )
                windows[arm].append(w)
                if arm == "prepaid":
                    backlog, drain_s = _drain(db, tenant, before + w.requests - w.errors)
                    drains.append({"backlog": backlog, "drain_s": drain_s})
        db.assert_balanced(tenant)
        return _figures(windows, drains)
    finally:
        if system is not None:
            system.stop()
        if backend == "postgresql":
            asyncio.run(drop_postgres_database(url))


def _figures(windows: dict[str, list[Window]], drains: list[dict[str, float]]) -> dict[str, Any]:
    def median(arm: str, field: str) -> float:
        return float(statistics.median(getattr(w, field) for w in windows[arm]))

    cpu = {arm: median(arm, "cpu_us_per_req") for arm in windows}
    return {
        "rps": {arm: median(arm, "rps") for arm in windows},
        "cpu_us_per_req": cpu,
        "cpu_ratio": round(cpu["prepaid"] / cpu["off"], 3),
        "round_cpu_ratios": [
            round(p.cpu_us_per_req / o.cpu_us_per_req, 3)
            for p, o in zip(windows["prepaid"], windows["off"], strict=True)
        ],
        "p99_ms": {arm: median(arm, "p99_ms") for arm in windows},
        "errors": {arm: sum(w.errors for w in windows[arm]) for arm in windows},
        "drains": drains,
        "windows": {arm: [asdict(w) for w in ws] for arm, ws in windows.items()},
    }


def bench_prepaid_rate(folder: Path) -> dict[str, Any]:
    backends = os.environ.get("BENCH_PREPAID_BACKENDS", "sqlite,postgresql").split(",")
    data: dict[str, Any] = {"kind": "prepaid-rate", "machine": machine(), "backends": {}}
    with upstream(folder, [MODE]) as nginx:
        for backend in backends:
            data["backends"][backend] = _backend(folder, nginx.port, backend, nginx)
            print(backend, _line(backend, data["backends"][backend]), flush=True)
    return data


def _line(backend: str, f: dict[str, Any]) -> str:
    drains = ", ".join(f"{d['backlog']} in {d['drain_s']} s" for d in f["drains"])
    return (
        f"req/s prepaid {f['rps']['prepaid']:.0f} (target {TARGET_RPS[backend]:.0f}), "
        f"unbilled {f['rps']['off']:.0f}; CPU us/req {f['cpu_us_per_req']['off']:.0f} -> "
        f"{f['cpu_us_per_req']['prepaid']:.0f} = {f['cpu_ratio']:.3f}x "
        f"(rounds {f['round_cpu_ratios']}, target {TARGET_CPU_RATIO}x); "
        f"errors {f['errors']}; backlog at window end, drained: {drains}"
    )


def prepaid_rate_markdown(data: dict[str, Any]) -> str:
    lines = [
        "| backend | prepaid req/s (target) | unbilled req/s | CPU µs/req unbilled -> prepaid "
        "| ratio (rounds) | p99 ms unbilled / prepaid | settles left at window end, drained in |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for backend, f in data["backends"].items():
        rounds = ", ".join(f"{r:.2f}" for r in f["round_cpu_ratios"])
        drains = ", ".join(f"{d['backlog']} / {d['drain_s']} s" for d in f["drains"])
        lines.append(
            f"| {backend} | {f['rps']['prepaid']:.0f} ({TARGET_RPS[backend]:.0f}) "
            f"| {f['rps']['off']:.0f} | {f['cpu_us_per_req']['off']:.0f} -> "
            f"{f['cpu_us_per_req']['prepaid']:.0f} | {f['cpu_ratio']:.3f} ({rounds}) "
            f"| {f['p99_ms']['off']:.1f} / {f['p99_ms']['prepaid']:.1f} | {drains} |"
        )
    return "\n".join(lines)

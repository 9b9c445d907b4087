"""Admission cost: the same model called with a key without limits ("off"), with a key whose
key and project have every kind of limit ("all": eight counters) and with a key that has rpm
and tpm limits of its own ("key"), in one llmrelay process without Redis (the in-process
limiter), in one with Redis, and on PostgreSQL without Redis: once counting alone
("pg-alone", LLMRELAY_LIMITS_ON_DATABASE=false: what a replica did before limits were shared
through the database) and once sharing them through the database ("pg-shared",
limits/postgres.py) (`python -m bench.run --limits [--quick] [--limiters a,b]`).

The issue's target: "Admission cost per request with the in-process limiter and with Redis,
as ratios to limits-off in the same run (targets >= 0.95 and >= 0.8)": per process and
limited arm, its throughput over the unlimited key's, at c=64 where core 1 is the bottleneck
(c=1 is reported too). The limits are far above what a run reaches, so no request is
refused; a refusal would be a bad answer.

Windows alternate as in bench.translation: per round, per mode and concurrency, the three
keys back to back, the order turning each round; medians over the rounds. Redis is the
server at 127.0.0.1:6379 (pinned to core 0 with the load generator when the script may).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.constants import LOADGEN_CORE
from bench.load import Driver
from bench.report import Target, machine, paired, print_table
from bench.systems import LIMIT_ARMS, System, check_answers, limited_mode, start_llmrelay
from bench.upstream import answer_fragments, upstream

LIMIT_MODES = ("plain", "sse")
REDIS_URL = "redis://127.0.0.1:6379/0"
#: process name -> (extra environment, target ratio limited/off). The PostgreSQL processes
#: get LLMRELAY_DATABASE_URL of a database of their own; the shared one's budget is Redis's
#: (a shared limiter: a round trip per admission, or per batch of them).
PROCESSES = {
    "in-process": ({}, 0.95),
    "redis": ({"LLMRELAY_REDIS_URL": REDIS_URL}, 0.8),
    "pg-alone": ({"LLMRELAY_LIMITS_ON_DATABASE": "false"}, 0.95),
    "pg-shared": ({}, 0.8),
}
_ON_POSTGRES = ("pg-alone", "pg-shared")


def compare_limits(
    folder: Path, quick: bool, rounds: int | None = None, limiters: list[str] | None = None
) -> dict[str, Any]:
    processes = {n: PROCESSES[n] for n in (limiters or list(PROCESSES))}
    modes = LIMIT_MODES
    levels = [1, 64]
    duration = 3.0 if quick else 6.0
    rounds = rounds or (3 if quick else 4)
    called = [limited_mode(m, arm) for m in modes for arm in LIMIT_ARMS]
    info = machine()
    _pin_redis()
    figures: dict[str, Any] = {}
    windows: dict[str, list[Any]] = {}
    problems: dict[str, dict[str, str]] = {}
    with upstream(folder, modes) as nginx:
        for name, (env, _) in processes.items():
            relay: System | None = None
            database = _postgres() if name in _ON_POSTGRES else None
            try:
                print(f"starting llmrelay ({name} limits) on core 1 ...", flush=True)
                if database is not None:
                    env = {**env, "LLMRELAY_DATABASE_URL": database}
                relay = start_llmrelay(
                    folder / name, nginx.port, modes, limited=modes, env=env, name=name
                )
                check_answers(relay, called)
                driver = Driver(folder, nginx)
                for label in called:
                    driver.window(relay, label, 64, 2 if quick else 4, keep=False)
                print(f"measuring {name}: {rounds} rounds, the three keys back to back ...")
                for r in range(rounds):
                    arms = LIMIT_ARMS if r % 2 == 0 else LIMIT_ARMS[::-1]
                    print(f" round {r + 1} of {rounds}", flush=True)
                    for mode in modes:
                        for c in levels:
                            for arm in arms:
                                driver.window(
                                    relay,
                                    limited_mode(mode, arm),
                                    c,
                                    duration,
                                    expect=answer_fragments(mode),
                                )
                problems[name] = dict(relay.problems)
            finally:
                if relay is not None:
                    relay.stop()
                if database is not None:
                    _drop_postgres(database)
            windows[name] = driver.windows
            off = LIMIT_ARMS[0]
            figures[name] = {
                arm: paired(driver.windows, modes, levels, (off, arm), limited_mode)
                for arm in LIMIT_ARMS[1:]
            }
    targets = [
        Target(
            f"{name}, {arm} limits: req/s vs off, {mode}, c={c}",
            v["throughput_ratio"],
            processes[name][1],
            "",
            at_most=False,
            valid=v["valid"],
        )
        for name, by_arm in figures.items()
        for arm, by_mode in by_arm.items()
        for mode, by_level in by_mode.items()
        for c, v in by_level.items()
        if c == "64"
    ]
    for name, ws in windows.items():
        print(f"\n{name}:")
        print_table(ws)
        for arm, by_mode in figures[name].items():
            for mode, by_level in by_mode.items():
                for c, v in by_level.items():
                    each = " ".join(f"{x:.3f}" for x in v["round_throughput_ratios"])
                    print(
                        f"  {arm:<4} {mode:<5} c={c:<3} req/s vs off {v['throughput_ratio']:.3f} "
                        f"(rounds {each}), CPU/req {v['cpu_ratio']:.3f}"
                    )
    print("\ntargets:")
    for t in targets:
        print(t.line())
    return {
        "kind": "limits",
        "quick": quick,
        "machine": info,
        "modes": list(modes),
        "levels": levels,
        "arms": list(LIMIT_ARMS),
        "rounds": rounds,
        "window_s": duration,
        "windows": {name: [asdict(w) for w in ws] for name, ws in windows.items()},
        "figures": figures,
        "problems": problems,
        "targets": [{**asdict(t), "met": t.met} for t in targets],
        "all_targets_met": all(t.met for t in targets),
    }


def _postgres() -> str:
    """A new database on the machine's PostgreSQL (127.0.0.1:5432), migrated."""
    from tests.support.databases import create_postgres_database

    from llmrelay.database_setup import migrate_database

    url = asyncio.run(create_postgres_database())
    asyncio.run(migrate_database(url))
    return url


def _drop_postgres(url: str) -> None:
    from tests.support.databases import drop_postgres_database

    with contextlib.suppress(Exception):
        asyncio.run(drop_postgres_database(url))


def _pin_redis() -> None:
    """Redis on the load generator's core, so it takes nothing from the system under test
    (its cost still shows: core 1 waits for its answers)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        pids = subprocess.run(
            ["pgrep", "-x", "redis-server"], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in pids:
            subprocess.run(
                ["taskset", "-a", "-p", "-c", LOADGEN_CORE, pid], capture_output=True, check=False
            )


def markdown(data: dict[str, Any]) -> str:
    """The figures of a limits results file as a Markdown table (for docs/performance.md)."""
    out = [
        "| limiter | limits | mode | conc | off req/s | limited req/s | ratio | ratio per round "
        "| off CPU us/req | limited CPU us/req | bad answers |",
        "|" + " --- |" * 11,
    ]
    for name, by_arm in data["figures"].items():
        for arm, by_mode in by_arm.items():
            for mode, by_level in by_mode.items():
                for c, v in by_level.items():
                    each = ", ".join(f"{x:.2f}" for x in v["round_throughput_ratios"])
                    out.append(
                        f"| {name} | {arm} | {mode} | {c} | {v['rps']['off']:.0f} "
                        f"| {v['rps'][arm]:.0f} | {v['throughput_ratio']:.3f} | {each} "
                        f"| {v['cpu_us_per_req']['off']:.0f} | {v['cpu_us_per_req'][arm]:.0f} "
                        f"| {sum(v['bad_answers'].values())} of {sum(v['requests'].values())} |"
                    )
    return "\n".join(out)

"""Recording cost: two llmrelay processes on the same config and upstream, one writing a
request record per request (the default) and one with LLMRELAY_RECORD_REQUESTS=false,
measured in alternating windows (`python -m bench.run --recording [--quick]`). With
`BENCH_RECORDING_BASE=journal` the base process writes records but no journal
(LLMRELAY_JOURNAL=false, gateway/journal.py): the ratio is then the journal's cost.

The metering issue's target: "Recording on vs off at concurrency 64, as a ratio in one run
(target >= 0.9)": throughput with records over throughput without, at c=64 where core 1 is the
bottleneck (c=1 is reported too). A record here is the full metering row (usage buckets,
cost per bucket, price version) in the SQLite file the gateway runs on, written in batches,
with the hours it falls in marked for the usage rollups, whose recompute (every 30 s) is
part of the measured CPU.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.load import Driver
from bench.report import Target, machine, paired, print_table, recorded_rows
from bench.systems import System, check_answers, start_llmrelay
from bench.upstream import answer_fragments, upstream

MODES = ("plain", "sse")
ARMS = ("off", "on")  # system names: recording off is the base


#: The base arm's settings, by BENCH_RECORDING_BASE.
BASES = {
    "records": {"LLMRELAY_RECORD_REQUESTS": "false"},
    "journal": {"LLMRELAY_JOURNAL": "false"},
}


def compare_recording(folder: Path, quick: bool) -> dict[str, Any]:
    base = os.environ.get("BENCH_RECORDING_BASE", "records")
    levels = [1, 64]
    duration = 3.0 if quick else 6.0
    rounds = 3 if quick else 4
    info = machine()
    systems: list[System] = []
    with upstream(folder, MODES) as nginx:
        try:
            print(f"starting llmrelay with and without {base} on core 1 ...", flush=True)
            off = start_llmrelay(folder / "off", nginx.port, MODES, env=BASES[base], name="off")
            on = start_llmrelay(folder / "on", nginx.port, MODES, name="on")
            systems += [off, on]
            driver = Driver(folder, nginx)
            for system in systems:
                check_answers(system, MODES)
                for mode in MODES:
                    driver.window(system, mode, 64, 2 if quick else 4, keep=False)
            print(f"measuring: {rounds} rounds, the two processes back to back ...", flush=True)
            for r in range(rounds):
                order = systems if r % 2 == 0 else systems[::-1]
                print(f" round {r + 1} of {rounds}", flush=True)
                for mode in MODES:
                    for c in levels:
                        for system in order:
                            driver.window(system, mode, c, duration, expect=answer_fragments(mode))
        finally:
            for system in systems:
                system.stop()
    figures = paired(driver.windows, MODES, levels, ARMS, lambda mode, _: mode, by_system=True)
    rows = {
        "on": recorded_rows(folder / "on" / "bench.db"),
        "off": recorded_rows(folder / "off" / "bench.db"),
    }
    targets = [
        Target(
            f"recording on vs off: req/s, {mode}, c={c}",
            v["throughput_ratio"],
            0.9,
            "",
            at_most=False,
            valid=v["valid"],
        )
        for mode, by_level in figures.items()
        for c, v in by_level.items()
        if c == "64"
    ]
    print_table(driver.windows)
    for mode, by_level in figures.items():
        for level, v in by_level.items():
            each = " ".join(f"{x:.3f}" for x in v["round_throughput_ratios"])
            print(
                f"  {mode:<5} c={level:<3} req/s on/off {v['throughput_ratio']:.3f} "
                f"(rounds {each}), "
                f"CPU/req {v['cpu_us_per_req']['off']:.0f} -> {v['cpu_us_per_req']['on']:.0f} us"
            )
    print(f"records written: on {rows['on']}, off {rows['off']}")
    print("\ntargets:")
    for t in targets:
        print(t.line())
    return {
        "kind": "recording",
        "base": base,
        "quick": quick,
        "machine": info,
        "modes": list(MODES),
        "levels": levels,
        "rounds": rounds,
        "window_s": duration,
        "windows": [asdict(w) for w in driver.windows],
        "figures": figures,
        "records": rows,
        "targets": [{**asdict(t), "met": t.met} for t in targets],
        "all_targets_met": all(t.met for t in targets),
    }


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "| mode | conc | off req/s | on req/s | ratio | ratio per round | off CPU us/req"
        " | on CPU us/req | bad answers |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, by_level in data["figures"].items():
        for c, v in by_level.items():
            each = ", ".join(f"{x:.2f}" for x in v["round_throughput_ratios"])
            bad = sum(v["bad_answers"].values())
            total = sum(v["requests"].values())
            lines.append(
                f"| {mode} | {c} | {v['rps']['off']:.0f} | {v['rps']['on']:.0f} | "
                f"{v['throughput_ratio']:.3f} | {each} | {v['cpu_us_per_req']['off']:.0f} | "
                f"{v['cpu_us_per_req']['on']:.0f} | {bad} of {total} |"
            )
    return "\n".join(lines)

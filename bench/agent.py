"""A coding agent's request, translated against passed through (`python -m bench.run --agent
[--quick]`).

An agent's request is large: Claude Code sends about 50 kB of system prompt, tools and
history every turn. The issue's target: at most 1 ms more CPU per request when such a
request is translated (Anthropic Messages in, an OpenAI chat upstream) than when the same
request is passed through (Messages to an Anthropic upstream), streamed and not.

One llmrelay process (`llmrelay serve`, one worker, SQLite, auth and request records on, on
core 1) with two one-route models per mode (bench.systems' translation models):
bench-anthropic-MODE to an anthropic provider answering from nginx's /anthropic-MODE (the
request passes through, `model` rewritten), bench-openai-MODE to an openai_compatible one
answering from /MODE/v1/chat/completions (the request is translated to chat, the answer or
every event back to Messages). The body is Claude Code's second request of the captured tool
task (tests/agents/captured/claude-code-tool.json, about 50 kB: thinking, output_config,
context_management, cache_control marks, 30-odd tools, the tool call and its result), the
same bytes to both models but for `model` and `stream`.

The load is bench.agent_load (Python, on core 0 beside nginx): every answer must be a whole
Message or event stream carrying `end_turn`. CPU per request is llmrelay's process CPU
(utime + stime from /proc, its settling after the window included) over the answered
requests. Rounds alternate the arms' order as bench.translation does; the report gives the
medians and the added CPU per request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.constants import FOREIGN_LIMIT, LOADGEN_CORE, PROJECT, SUT_CORE
from bench.load import Window
from bench.procs import core_busy_seconds, cpu_seconds, settle, wait_for_quiet_core
from bench.report import Target, machine, paired, print_table
from bench.systems import TRANSLATION_ARMS, System, start_llmrelay, translated_mode
from bench.upstream import upstream

MODES = ("plain", "sse")
CAPTURED = PROJECT / "tests" / "agents" / "captured" / "claude-code-tool.json"
#: The target: translated CPU per request minus passed-through CPU per request.
TARGET_ADDED_US = 1000.0
#: How a whole answer ends: a Message's last field, an event stream's last event.
_ENDS = {"plain": "}", "sse": 'data: {"type":"message_stop"}'}
_FRAGMENTS = ['"stop_reason":"end_turn"']


def agent_body(mode: str, model: str) -> bytes:
    """Claude Code's captured request for `model`, streamed or not."""
    exchanges = json.loads(CAPTURED.read_text())["exchanges"]
    body = dict(exchanges[-1]["body"])
    body["model"] = model
    body["stream"] = mode == "sse"
    return json.dumps(body, separators=(",", ":")).encode()


def translation_us(repeats: int = 200) -> dict[str, Any]:
    """In this process: the CPU microseconds of the request's translation alone (Messages to
    the chat body, and that body's serialisation), medians of 5 runs of `repeats`; with the
    compiled build when it is current (`build` says which: llmrelay._compiled.MODE)."""
    import orjson

    from llmrelay import _compiled
    from llmrelay.protocols.anthropic_request import anthropic_request_to_chat

    payload = json.loads(agent_body("plain", "bench-openai-plain"))
    runs = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(repeats):
            body, _dropped = anthropic_request_to_chat(payload, upstream_model="gpt-4o-mini")
            orjson.dumps(body)
        runs.append((time.process_time() - started) / repeats * 1e6)
    return {"request_to_chat_us": round(sorted(runs)[2], 1), "build": _compiled.MODE}


def compare_agent(folder: Path, quick: bool, rounds: int | None = None) -> dict[str, Any]:
    levels = [1, 8]
    duration = 3.0 if quick else 8.0
    rounds = rounds or (3 if quick else 5)
    info = machine()
    alone = translation_us()
    print(f"the request's translation alone, in process: {alone}", flush=True)
    bodies: dict[str, Path] = {}
    windows: list[Window] = []
    with upstream(folder, MODES) as nginx:
        relay = start_llmrelay(folder / "llmrelay", nginx.port, MODES, translated=MODES)
        try:
            for mode in MODES:
                for api in TRANSLATION_ARMS:
                    label = translated_mode(mode, api)
                    relay.paths[label] = "/v1/messages"
                    bodies[label] = folder / f"agent-{label}.json"
                    bodies[label].write_bytes(agent_body(mode, f"bench-{label}"))
            size = bodies[translated_mode("plain", "openai")].stat().st_size
            print(f"request body: {size} bytes; warm-up ...", flush=True)
            for label in bodies:
                _window(relay, nginx.pids(), label, bodies[label], 8, 2.0)
            for r in range(rounds):
                arms = TRANSLATION_ARMS if r % 2 == 0 else TRANSLATION_ARMS[::-1]
                print(f" round {r + 1} of {rounds}", flush=True)
                for mode in MODES:
                    for c in levels:
                        for api in arms:
                            label = translated_mode(mode, api)
                            windows.append(
                                _window(relay, nginx.pids(), label, bodies[label], c, duration)
                            )
            peak_kb = relay.peak_rss_kb()
        finally:
            relay.stop()
    translated, passed = TRANSLATION_ARMS  # openai: translated; anthropic: passed through
    figures = paired(windows, MODES, levels, (passed, translated), translated_mode)
    targets = [
        Target(
            f"translated - passed through CPU us/req, {mode}, c={c}",
            v["cpu_us_per_req"][translated] - v["cpu_us_per_req"][passed],
            TARGET_ADDED_US,
            "us",
            at_most=True,
            valid=v["valid"],
        )
        for mode, by_level in figures.items()
        for c, v in by_level.items()
    ]
    print()
    print_table(windows)
    print(f"\n50 kB Claude Code request, translated against passed through, {rounds} rounds:")
    for mode, by_level in figures.items():
        for level, v in by_level.items():
            cpu = v["cpu_us_per_req"]
            print(
                f"  {mode:<5} c={level:<3} CPU us/req passed through {cpu[passed]:.0f}, "
                f"translated {cpu[translated]:.0f} ({cpu[translated] - cpu[passed]:+.0f} us)"
                + ("" if v["valid"] else "  (ERRORS)")
            )
    print("\ntargets:")
    for t in targets:
        print(t.line())
    return {
        "kind": "agent",
        "quick": quick,
        "machine": info,
        "body_bytes": size,
        "translation_alone": alone,
        "modes": list(MODES),
        "levels": levels,
        "arms": [passed, translated],
        "rounds": rounds,
        "window_s": duration,
        "windows": [asdict(w) for w in windows],
        "figures": figures,
        "peak_rss_kb": peak_kb,
        "targets": [{**asdict(t), "met": t.met} for t in targets],
        "all_targets_met": all(t.met for t in targets),
        "errors": sum(w.errors for w in windows),
    }


def _window(
    system: System, loadgen: list[int], label: str, body: Path, connections: int, seconds: float
) -> Window:
    """One measured window of `label` at `connections`, with the load on core 0."""
    mode = label.rsplit("-", 1)[1]
    wait_for_quiet_core()
    sut = system.pids()
    settle(sut)
    cpu0, gen0 = cpu_seconds(sut), cpu_seconds(loadgen)
    cores0 = core_busy_seconds()
    started = time.monotonic()
    command = [
        "taskset",
        "-c",
        LOADGEN_CORE,
        sys.executable,
        "-m",
        "bench.agent_load",
        str(system.port),
        system.paths[label],
        str(body),
        str(connections),
        f"{seconds:g}",
        _ENDS[mode],
        *_FRAGMENTS,
    ]
    done = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, check=True)
    wall = time.monotonic() - started
    line = next(x for x in done.stdout.splitlines() if x.startswith("AGENTJSON "))
    result = json.loads(line.removeprefix("AGENTJSON "))
    cores1, gen1 = core_busy_seconds(), cpu_seconds(loadgen)
    sut_at_end = cpu_seconds(sut)
    settle_s = settle(sut)
    sut_cpu = cpu_seconds(sut) - cpu0
    requests = int(result["requests"])
    core1 = cores1.get(f"cpu{SUT_CORE}", 0.0) - cores0.get(f"cpu{SUT_CORE}", 0.0)
    took = float(result["duration_s"])
    w = Window(
        system=system.name,
        mode=label,
        connections=connections,
        duration_s=round(took, 3),
        requests=requests,
        rps=round(requests / took, 1) if took else 0.0,
        p50_ms=round(result["p50_ms"], 3),
        p90_ms=round(result["p90_ms"], 3),
        p99_ms=round(result["p99_ms"], 3),
        max_ms=round(result["max_ms"], 3),
        non200=int(result["non200"]),
        bad_body=int(result["bad_body"]),
        first_bad_status=0,
        socket_errors=0,
        cpu_s=round(sut_cpu, 3),
        cpu_us_per_req=round(sut_cpu / requests * 1e6, 1) if requests else 0.0,
        sut_core_util=round((sut_at_end - cpu0) / wall, 3),
        loadgen_core_util=round((gen1 - gen0) / wall, 3),
        core1_foreign_util=round(max(0.0, core1 - (sut_at_end - cpu0)) / wall, 3),
        settle_s=round(settle_s, 2),
        rss_kb=system.rss_kb(),
    )
    flag = f"  !! {w.errors} ERRORS" if w.errors else ""
    if w.core1_foreign_util > FOREIGN_LIMIT:
        flag += f"  (other load on core {SUT_CORE}: {w.core1_foreign_util:.0%})"
    print(
        f"  {label:<16} c={connections:<3} {w.rps:>6.0f} req/s  p50 {w.p50_ms:7.2f} ms  "
        f"{w.cpu_us_per_req:6.0f} us CPU/req{flag}",
        flush=True,
    )
    return w


def markdown(data: dict[str, Any]) -> str:
    """The figures of an agent results file as a Markdown table (docs/performance.md)."""
    passed, translated = data["arms"]
    out = [
        "| mode | conc | passed through req/s | translated req/s | passed through CPU us/req "
        "| translated CPU us/req | added CPU us/req | CPU us/req added per round "
        "| p50 ms passed / translated | bad answers |",
        "|" + " --- |" * 10,
    ]
    for mode, by_level in data["figures"].items():
        for c, v in by_level.items():
            rps, cpu, p50 = v["rps"], v["cpu_us_per_req"], v["p50_ms"]
            per_round = _round_added(data, mode, int(c))
            out.append(
                f"| {mode} | {c} | {rps[passed]:.0f} | {rps[translated]:.0f} "
                f"| {cpu[passed]:.0f} | {cpu[translated]:.0f} "
                f"| {cpu[translated] - cpu[passed]:+.0f} | {per_round} "
                f"| {p50[passed]:.2f} / {p50[translated]:.2f} "
                f"| {sum(v['bad_answers'].values())} of {sum(v['requests'].values())} |"
            )
    return "\n".join(out)


def _round_added(data: dict[str, Any], mode: str, c: int) -> str:
    passed, translated = data["arms"]

    def cpu(api: str) -> list[float]:
        label = translated_mode(mode, api)
        return [
            w["cpu_us_per_req"]
            for w in data["windows"]
            if w["mode"] == label and w["connections"] == c
        ]

    return ", ".join(f"{b - a:+.0f}" for a, b in zip(cpu(passed), cpu(translated), strict=True))

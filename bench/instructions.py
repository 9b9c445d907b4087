"""CPU instructions per request under callgrind: the bare proxy against llmrelay, llmrelay's
limited keys against its unlimited one, and chat served from an Anthropic provider (the
translation) against chat from an OpenAI-compatible one (`python -m bench.run --instructions`).

Wall-clock CPU time per request moves by several per cent from one run to the next on a
shared machine (docs/performance.md shows rounds of the same code 8 % apart). Valgrind's
callgrind counts the instructions a process executes instead: the same code, inputs and
request count give the same count whatever else the machine is doing, so a change of 1 % is
visible, and two measurements may even run side by side. It counts user-space instructions
only (no system calls, no cache misses), so its ratios are larger than the CPU-time ratios
(the kernel's share of a request, about a fifth here, is the same for both systems) and it
says nothing about time by itself: it is for comparing code, the rounds method of bench.run
for the targets.

Each system runs under `valgrind --tool=callgrind --instr-atstart=no` on core 1 (about 50
times slower: a few hundred requests a second), is warmed up, then counted over one wrk
window per mode at concurrency 8; the count is divided by the requests wrk completed. The
figure includes what a request causes after its answer (the batched record writes: the
window ends with a pause before the count is dumped). Needs the Debian package valgrind.
"""

from __future__ import annotations

import contextlib
import glob
import http.client
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.constants import BARE_PROXY, BENCH_KEY, SUT_CORE
from bench.load import run_wrk, write_lua
from bench.procs import free_port, http_get, http_post, venv_program
from bench.report import machine
from bench.systems import (
    _ARM_KEYS,
    LIMIT_ARMS,
    limited_mode,
    llmrelay_config,
    translated_mode,
)
from bench.upstream import request_body, upstream

MODES = ("plain", "sse", "embeddings")
#: Modes with limited-key and anthropic-upstream arms (embeddings: bare and off only).
CHAT_MODES = ("plain", "sse")
CONNECTIONS = 8
WARM_UP_S = 5.0
#: After the window: the recorder's gather (0.2 s) and batch write finish inside the count.
FLUSH_S = 3.0
READY_LIMIT_S = 300.0


class Counted:
    """One system under callgrind, counting only between `start` and `dump`."""

    def __init__(self, name: str, folder: Path, command: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.folder = folder
        self.port = free_port()
        self._out = folder / f"callgrind-{name}.%p.out"
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=yes"]
        self.process = subprocess.Popen(
            [
                *("taskset", "-c", SUT_CORE, *valgrind, f"--callgrind-out-file={self._out}"),
                *(*command, "--port", str(self.port)),
            ],
            env=env,
            cwd=folder,
            stdout=(folder / f"{name}.log").open("ab"),
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, ready: str, path: str) -> None:
        started = time.monotonic()
        while time.monotonic() - started < READY_LIMIT_S:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(OSError, http.client.HTTPException):
                if ready == "POST":
                    status = http_post(self.port, path, request_body("plain"))[0]
                else:
                    status = http_get(self.port, ready, timeout_s=10.0)
                if status == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not get ready under valgrind")

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self._server_pid())], capture_output=True)

    def _server_pid(self) -> int:
        """The counted process serving the port (the bare proxy runs uvicorn as a child)."""
        listing = subprocess.run(["callgrind_control"], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            ours = line.startswith("PID ") and f"--port {self.port}" in line
            if ours and ("uvicorn" in line or " serve " in line):
                return int(line.split()[1].rstrip(":"))
        return self.process.pid

    def count(self, path: str, body: str, key: str, seconds: float) -> tuple[int, int]:
        """(instructions, requests) over one window."""
        answer = "list" if path.endswith("/embeddings") else "chat.completion"
        script = write_lua(self.folder, path, body, 0, (), (), key, answer)
        run_wrk(self.port, script, CONNECTIONS, WARM_UP_S)
        self._control("--zero")
        self._control("--instr=on")
        requests = int(run_wrk(self.port, script, CONNECTIONS, seconds)["requests"])
        time.sleep(FLUSH_S)
        self._control("--instr=off")
        before = set(glob.glob(str(self.folder / f"callgrind-{self.name}.*")))
        self._control("--dump")
        for _ in range(100):
            new = set(glob.glob(str(self.folder / f"callgrind-{self.name}.*"))) - before
            if new:
                time.sleep(0.5)  # let the dump finish writing
                return _totals(Path(new.pop())), requests
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: callgrind wrote no dump")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _totals(dump: Path) -> int:
    with dump.open() as lines:
        for line in lines:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def _per_request(instructions: int, requests: int) -> float:
    return instructions / requests if requests else 0.0


def count_instructions(
    folder: Path, seconds: float, cells: frozenset[str] | None = None
) -> dict[str, Any]:
    """`cells`: only these `MODE:ARM` counts (arms: bare, off, all, key, anthropic), for a
    quick A/B of one part; None counts every cell."""

    def wanted(mode: str, arm: str) -> bool:
        return cells is None or f"{mode}:{arm}" in cells

    if shutil.which("valgrind") is None:
        sys.exit("missing: valgrind (apt-get install -y valgrind)")
    python = sys.executable
    counts: dict[str, dict[str, float]] = {}
    with upstream(folder, MODES) as nginx:
        bare = Counted(
            "bare",
            folder,
            [
                *(python, str(BARE_PROXY), "--server", "uvicorn", "--client", "aiohttp"),
                *("--upstream", f"http://127.0.0.1:{nginx.port}"),
            ],
            dict(os.environ),
        )
        try:
            bare.wait_ready("POST", "/plain/v1/chat/completions")
            for mode in MODES:
                counts.setdefault(mode, {})
                if not wanted(mode, "bare"):
                    continue
                path = (
                    "/plain/v1/embeddings"
                    if mode == "embeddings"
                    else f"/{mode}/v1/chat/completions"
                )
                total, n = bare.count(path, request_body(mode), BENCH_KEY, seconds)
                counts[mode]["bare"] = each = _per_request(total, n)
                print(f"  bare      {mode:<10} {each / 1000:8.1f}k per request")
        finally:
            bare.stop()
        config = folder / "llmrelay.yaml"
        config.write_text(llmrelay_config(nginx.port, MODES, (), CHAT_MODES, CHAT_MODES))
        env = {**os.environ, "LLMRELAY_DATABASE_URL": f"sqlite:///{folder / 'bench.db'}"}
        relay = Counted(
            "llmrelay", folder, [venv_program("llmrelay"), "serve", "--config", str(config)], env
        )
        try:
            relay.wait_ready("/readyz", "")
            for mode in MODES:
                path = "/v1/embeddings" if mode == "embeddings" else "/v1/chat/completions"
                for arm in LIMIT_ARMS:
                    if not wanted(mode, arm) or (arm != "off" and mode not in CHAT_MODES):
                        continue
                    label = mode if arm == "off" else limited_mode(mode, arm)
                    body = request_body(mode if arm == "off" else limited_mode(mode, arm))
                    key = _ARM_KEYS.get(arm, BENCH_KEY)
                    total, n = relay.count(path, body, key, seconds)
                    counts[mode][f"llmrelay-{arm}"] = each = _per_request(total, n)
                    print(f"  llmrelay  {label:<10} {each / 1000:8.1f}k per request")
                if not wanted(mode, "anthropic") or mode not in CHAT_MODES:
                    continue
                label = translated_mode(mode, "anthropic")  # chat from an anthropic provider
                body = request_body(label)
                total, n = relay.count("/v1/chat/completions", body, BENCH_KEY, seconds)
                counts[mode]["llmrelay-anthropic"] = each = _per_request(total, n)
                print(f"  llmrelay  {label:<10} {each / 1000:8.1f}k per request")
        finally:
            relay.stop()
    ratios = {mode: _ratios(by) for mode, by in counts.items()}
    for mode, figures in ratios.items():
        shown = ", ".join(f"{name} {value:.3f}" for name, value in figures.items())
        print(f"{mode}: {shown}")
    return {
        "kind": "instructions",
        "machine": machine(),
        "window_s": seconds,
        "connections": CONNECTIONS,
        "instructions_per_request": counts,
        "ratios": ratios,
    }


def _ratios(by: dict[str, float]) -> dict[str, float]:
    """Each arm over its baseline, where both were counted."""
    pairs = {
        "llmrelay/bare": ("llmrelay-off", "bare"),
        "all/off": ("llmrelay-all", "llmrelay-off"),
        "key/off": ("llmrelay-key", "llmrelay-off"),
        "anthropic/openai": ("llmrelay-anthropic", "llmrelay-off"),
    }
    return {
        name: by[top] / by[base] for name, (top, base) in pairs.items() if top in by and base in by
    }


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "| mode | bare | llmrelay | llmrelay/bare | limits all | all/off | limits key | key/off"
        " | anthropic upstream | anthropic/openai |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def count(by: dict[str, float], name: str) -> str:
        return f"{by[name] / 1000:.1f}k" if name in by else ""

    def ratio(figures: dict[str, float], name: str) -> str:
        return f"{figures[name]:.3f}" if name in figures else ""

    for mode, by in data["instructions_per_request"].items():
        r = data["ratios"][mode]
        cells = (
            count(by, "bare"),
            count(by, "llmrelay-off"),
            ratio(r, "llmrelay/bare"),
            count(by, "llmrelay-all"),
            ratio(r, "all/off"),
            count(by, "llmrelay-key"),
            ratio(r, "key/off"),
            count(by, "llmrelay-anthropic"),
            ratio(r, "anthropic/openai"),
        )
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

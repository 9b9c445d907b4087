"""Processes and /proc: CPU seconds, memory and core load of process trees, plus tiny HTTP
calls that need no event loop."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.constants import BENCH_KEY, CLK_TCK, FOREIGN_LIMIT, QUIET_WAIT_S, SUT_CORE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()  # fields from 3 (state) on


def process_tree(pid: int) -> list[int]:
    """pid and all its living descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(
                    int(entry.name)
                )
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of these processes (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(pid)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / CLK_TCK


def memory_kb(pids: Sequence[int], name: str) -> int:
    """Sum of a /proc/PID/status field (VmRSS, VmHWM) over these processes, in KiB."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(name + ":"):
                    total += int(line.split()[1])
    return total


def core_busy_seconds() -> dict[str, float]:
    """Busy (not idle, not iowait) seconds per CPU since boot."""
    out: dict[str, float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            v = [int(x) for x in values[:8]]
            out[name] = (sum(v) - v[3] - v[4]) / CLK_TCK
    return out


def settle(pids: Sequence[int], limit_s: float = 30.0) -> float:
    """Wait until these processes use < 5% of a core over 200 ms; the seconds it took."""
    started = time.monotonic()
    last = cpu_seconds(pids)
    while time.monotonic() - started < limit_s:
        time.sleep(0.2)
        now = cpu_seconds(pids)
        if now - last <= 0.01:
            break
        last = now
    return time.monotonic() - started


def wait_for_quiet_core(limit_s: float = QUIET_WAIT_S) -> None:
    """Before a window: wait (up to `limit_s`) until core 1 is idle, i.e. no other process
    (a test suite, a build) is using it while the systems under test are idle."""
    started = time.monotonic()
    told = False
    while time.monotonic() - started < limit_s:
        before = core_busy_seconds().get(f"cpu{SUT_CORE}", 0.0)
        time.sleep(0.5)
        busy = (core_busy_seconds().get(f"cpu{SUT_CORE}", 0.0) - before) / 0.5
        if busy <= FOREIGN_LIMIT:
            return
        if not told:
            print(f"  (waiting: something else uses {busy:.0%} of core {SUT_CORE})", flush=True)
            told = True
    print(f"  (core {SUT_CORE} still busy after {limit_s:.0f} s; measuring anyway)", flush=True)


def http_get(port: int, path: str, timeout_s: float = 2.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def http_post(port: int, path: str, body: str, key: str = BENCH_KEY) -> tuple[int, bytes, str]:
    """status, body, content-type"""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        conn.request("POST", path, body=body.encode(), headers=headers)
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("content-type", "")
    finally:
        conn.close()


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def venv_program(name: str) -> str:
    """A program of this virtualenv (llmrelay, granian), else from PATH."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name) or name

"""wrk as the load generator: a Lua script that checks every answer, and measured windows."""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.constants import BENCH_KEY, FOREIGN_LIMIT, FOREIGN_RETRIES, LOADGEN_CORE, SUT_CORE
from bench.procs import core_busy_seconds, cpu_seconds, settle, wait_for_quiet_core
from bench.systems import System
from bench.upstream import Nginx, answer_object, request_body

_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"
wrk.path = [==[%(path)s]==]
wrk.body = [==[%(body)s]==]
local limit = %(limit)d
local mixed = { %(mixed)s }
local expect = { %(expect)s }
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  responses = 0
  non200 = 0
  bad_body = 0
  first_bad = 0
  turn = 0
end

if #mixed > 0 then
  function request()
    turn = turn %% #mixed + 1
    return wrk.format(nil, mixed[turn][1], nil, mixed[turn][2])
  end
end

-- A good answer: 200 and a whole JSON completion (or embeddings list), or a stream that ends
-- with [DONE] and carries no error event.
local function complete(body)
  if body == nil then return false end
  if string.sub(body, 1, 5) == "data:" then
    return string.sub(body, -14) == "data: [DONE]\\n\\n"
      and string.find(body, '"error":{', 1, true) == nil
  end
  return string.find(body, '"object":"%(object)s"', 1, true) ~= nil
end

-- When the run names them: pieces a correct answer carries, in this order (its text, finish
-- reason, token counts: bench.upstream.answer_fragments).
local function carries(body)
  local from = 1
  for _, piece in ipairs(expect) do
    local _, last = string.find(body, piece, from, true)
    if last == nil then return false end
    from = last + 1
  end
  return true
end

function response(status, headers, body)
  responses = responses + 1
  if status ~= 200 then
    non200 = non200 + 1
    if first_bad == 0 then first_bad = status end
  elseif not complete(body) or not carries(body) then
    bad_body = bad_body + 1
  end
  if limit > 0 and responses == limit then
    -- wrk's main thread sleeps for the whole -d; the benchmark interrupts it on this line
    io.write("BENCHLIMIT\\n")
    io.flush()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local bad, broken, seen, fb = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    bad = bad + t:get("non200")
    broken = broken + t:get("bad_body")
    seen = seen + t:get("responses")
    if t:get("first_bad") ~= 0 then fb = t:get("first_bad") end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%%d,"responses_seen":%%d,"duration_us":%%d,"bytes":%%d,' ..
    '"non200":%%d,"bad_body":%%d,"first_bad_status":%%d,"err_connect":%%d,"err_read":%%d,' ..
    '"err_write":%%d,"err_status":%%d,"err_timeout":%%d,"lat_mean_us":%%.1f,' ..
    '"lat_p50_us":%%d,"lat_p90_us":%%d,"lat_p99_us":%%d,"lat_max_us":%%d}\\n',
    summary.requests, seen, summary.duration, summary.bytes, bad, broken, fb, e.connect,
    e.read, e.write, e.status, e.timeout, latency.mean, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.max))
end
"""


def write_lua(
    folder: Path,
    path: str,
    body: str,
    limit: int,
    mixed: Sequence[tuple[str, str]],
    expect: Sequence[str] = (),
    key: str = BENCH_KEY,
    answer: str = "chat.completion",
) -> Path:
    """`answer`: the `object` a whole JSON answer must name (embeddings: "list")."""
    items = ", ".join(f"{{ [==[{p}]==], [==[{b}]==] }}" for p, b in mixed)
    pieces = ", ".join(f"[==[{piece}]==]" for piece in expect)
    script = _LUA % {
        "key": key,
        "path": path,
        "body": body,
        "limit": limit,
        "mixed": items,
        "expect": pieces,
        "object": answer,
    }
    target = folder / f"wrk-{hashlib.sha256(script.encode()).hexdigest()[:12]}.lua"
    target.write_text(script)
    return target


def run_wrk(port: int, script: Path, connections: int, duration_s: float) -> dict[str, Any]:
    """Run wrk on core 0; its summary line as a dict. A request limit in the script ends the
    run early (wrk itself would wait for -d): SIGINT makes wrk stop and report."""
    wrk = shutil.which("wrk") or "wrk"
    options = f"-t1 -c{connections} -d{duration_s:g}s --timeout 15s --latency -s {script}"
    command = ["taskset", "-c", LOADGEN_CORE, wrk, *options.split(), f"http://127.0.0.1:{port}/"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    result: dict[str, Any] | None = None
    output = []
    for line in process.stdout:
        output.append(line)
        if line.startswith("BENCHLIMIT"):
            process.send_signal(signal.SIGINT)
        elif line.startswith("BENCHJSON "):
            result = json.loads(line.removeprefix("BENCHJSON "))
    errors = process.stderr.read()
    process.wait()
    if result is None or errors.strip():  # a script error makes wrk send plain GETs
        raise RuntimeError(f"wrk failed ({process.returncode}): {''.join(output)}\n{errors}")
    return result


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Window:
    system: str
    mode: str
    connections: int
    duration_s: float
    requests: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    non200: int
    bad_body: int  # 200 with an incomplete body or an error event
    first_bad_status: int
    socket_errors: int
    cpu_s: float
    cpu_us_per_req: float
    sut_core_util: float  # the system's CPU seconds / wall seconds (1.0 = core 1 saturated)
    loadgen_core_util: float  # nginx + wrk CPU seconds / wall seconds (core 0)
    core1_foreign_util: float  # core-1 busy time not spent by the system, / wall seconds
    settle_s: float  # after wrk ended, until the system went idle (its CPU is counted)
    rss_kb: int

    @property
    def errors(self) -> int:
        return self.non200 + self.bad_body + self.socket_errors


class Driver:
    def __init__(self, folder: Path, nginx: Nginx) -> None:
        self.folder = folder
        self.nginx = nginx
        self.windows: list[Window] = []

    def window(
        self,
        system: System,
        mode: str,
        connections: int,
        duration_s: float,
        *,
        keep: bool = True,
        expect: Sequence[str] = (),
    ) -> Window:
        """One measured window. When something else used core 1 meanwhile (another
        process, not the system under test), the window is measured again, up to twice.
        `expect`: fragments every answer must carry in order (else it counts as bad)."""
        path, body = system.paths[mode], request_body(mode)
        key = system.keys.get(mode, BENCH_KEY)
        script = write_lua(self.folder, path, body, 0, (), expect, key, answer_object(mode))
        for _ in range(1 + FOREIGN_RETRIES if keep else 1):
            if keep:
                wait_for_quiet_core()
            w = self._measure(system, mode, connections, duration_s, script)
            if w.core1_foreign_util <= FOREIGN_LIMIT:
                break
        if keep:
            self.windows.append(w)
        return w

    def soak(
        self, system: System, modes: Sequence[str], until_total: int, connections: int = 64
    ) -> Window | None:
        """Alternating requests of `modes` until the system has answered `until_total`."""
        missing = until_total - system.requests_total
        if missing <= 0:
            return None
        mixed = [(system.paths[m], request_body(m)) for m in modes]
        script = write_lua(self.folder, mixed[0][0], mixed[0][1], missing, mixed)
        return self._measure(system, "mixed", connections, 3600, script)

    def _measure(
        self,
        system: System,
        mode: str,
        connections: int,
        duration_s: float,
        script: Path,
    ) -> Window:
        sut, gen = system.pids(), self.nginx.pids()
        settle(sut)
        cpu0, gen0, wrk0 = cpu_seconds(sut), cpu_seconds(gen), _children_cpu_s()
        cores0 = core_busy_seconds()
        started = time.monotonic()
        result = run_wrk(system.port, script, connections, duration_s)
        wall = time.monotonic() - started
        cores1, gen1, wrk1 = core_busy_seconds(), cpu_seconds(gen), _children_cpu_s()
        sut_at_end = cpu_seconds(sut)
        settle_s = settle(sut)
        sut_cpu = cpu_seconds(sut) - cpu0
        requests = int(result["requests"])
        system.requests_total += requests
        seconds = result["duration_us"] / 1e6
        core1 = cores1.get(f"cpu{SUT_CORE}", 0.0) - cores0.get(f"cpu{SUT_CORE}", 0.0)
        w = Window(
            system=system.name,
            mode=mode,
            connections=connections,
            duration_s=round(seconds, 3),
            requests=requests,
            rps=round(requests / seconds, 1) if seconds else 0.0,
            p50_ms=result["lat_p50_us"] / 1000,
            p90_ms=result["lat_p90_us"] / 1000,
            p99_ms=result["lat_p99_us"] / 1000,
            max_ms=result["lat_max_us"] / 1000,
            non200=int(result["non200"]),
            bad_body=int(result["bad_body"]),
            first_bad_status=int(result["first_bad_status"]),
            socket_errors=sum(
                int(result[k]) for k in ("err_connect", "err_read", "err_write", "err_timeout")
            ),
            cpu_s=round(sut_cpu, 3),
            cpu_us_per_req=round(sut_cpu / requests * 1e6, 1) if requests else 0.0,
            sut_core_util=round((sut_at_end - cpu0) / wall, 3),
            loadgen_core_util=round(((gen1 - gen0) + (wrk1 - wrk0)) / wall, 3),
            core1_foreign_util=round(max(0.0, core1 - (sut_at_end - cpu0)) / wall, 3),
            settle_s=round(settle_s, 2),
            rss_kb=system.rss_kb(),
        )
        flag = f"  !! {w.errors} ERRORS" if w.errors else ""
        if w.core1_foreign_util > FOREIGN_LIMIT:
            flag += f"  (other load on core {SUT_CORE}: {w.core1_foreign_util:.0%})"
        print(
            f"  {system.name:<22} {mode:<9} c={connections:<4} {w.rps:>7.0f} req/s  "
            f"p50 {w.p50_ms:7.2f} ms  p99 {w.p99_ms:7.2f} ms  {w.cpu_us_per_req:6.0f} us CPU/req"
            f"  core1 {w.sut_core_util:4.0%}  core0 {w.loadgen_core_util:4.0%}{flag}",
            flush=True,
        )
        return w

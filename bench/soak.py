"""Soak: one `llmrelay serve` under mixed traffic for a long time, its memory watched.

    python -m bench.soak                           # 30 minutes (the figure in performance.md)
    python -m bench.soak --duration-s 120 --warmup-s 30   # a short try of the harness

What runs: nginx (bench.upstream) as the provider on core 0 with the load generator (this
process, aiohttp, `--concurrency` loops sharing `--rate` requests a second); llmrelay
(SQLite, records on) on core 1. Each loop sends, in turn, the requests of MIX: chat plain
and streamed, Messages plain and streamed (bridged to the chat upstream), embeddings, a key
limited to a low rpm (200 and 429), and the errors a gateway answers every day (unknown
model 404, malformed JSON 400, a bad key 401, a provider that answers 404: 502, then 503
while its breaker is open). Every answer's status is checked against what its kind may
answer; a stream must end with its terminator.

Every `--sample-s` the resident memory (VmRSS) of the gateway's process tree is sampled.
The run fails (exit 1) when a sample passes `--max-rss-mib`, when the memory still grows
after `--warmup-s` (the median of the last five minutes above the median of the first five
minutes after warm-up by more than `--max-growth-mib`), or when any answer was not one its
request may get. Results (every sample, counts per kind, CPU, the machine's load) go to
bench/results/soak-*.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.constants import BENCH_KEY, LOADGEN_CORE, RESULTS
from bench.procs import cpu_seconds, free_port, memory_kb, venv_program
from bench.systems import System
from bench.upstream import request_body, upstream

LIMITED = "sk-bench-soak-limited-0123456789abcdefghij"
#: A limited key's rpm: low enough that the loops pass it every minute (429s are part of
#: the mix), high enough that it also admits.
LIMITED_RPM = 600


@dataclass(frozen=True)
class Kind:
    name: str
    path: str
    body: bytes
    allowed: frozenset[int]
    key: str = BENCH_KEY
    headers: tuple[tuple[str, str], ...] = ()
    #: A stream: a 200 must end with this.
    ends_with: bytes | None = None


def _messages(model: str, stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 32,
        "messages": [{"role": "user", "content": "Say hello and ask how I am."}],
    }
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


ANTHROPIC = (("anthropic-version", "2023-06-01"),)
OK = frozenset({200})
MIX = (
    Kind("chat", "/v1/chat/completions", request_body("plain").encode(), OK),
    Kind(
        "chat-stream",
        "/v1/chat/completions",
        request_body("sse").encode(),
        OK,
        ends_with=b"data: [DONE]\n\n",
    ),
    Kind("messages", "/v1/messages", _messages("bench-plain", False), OK, headers=ANTHROPIC),
    Kind(
        "messages-stream",
        "/v1/messages",
        _messages("bench-plain", True),
        OK,
        headers=ANTHROPIC,
        ends_with=b'{"type":"message_stop"}\n\n',
    ),
    Kind(
        "embeddings",
        "/v1/embeddings",
        json.dumps({"model": "bench-embed", "input": "some text to embed"}).encode(),
        OK,
    ),
    Kind(
        "limited",
        "/v1/chat/completions",
        request_body("plain").encode(),
        frozenset({200, 429}),
        key=LIMITED,
    ),
    Kind(
        "unknown-model",
        "/v1/chat/completions",
        json.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]}).encode(),
        frozenset({404}),
    ),
    Kind(
        "malformed",
        "/v1/chat/completions",
        b'{"model": "bench-plain", "messages": [',
        frozenset({400}),
    ),
    Kind(
        "bad-key",
        "/v1/chat/completions",
        request_body("plain").encode(),
        frozenset({401}),
        key="sk-bench-not-a-key-0123456789",
    ),
    Kind(
        "provider-404",
        "/v1/chat/completions",
        json.dumps(
            {"model": "bench-broken", "messages": [{"role": "user", "content": "x"}]}
        ).encode(),
        frozenset({502, 503}),  # 503 once the route's breaker is open
    ),
)


def config(upstream_port: int) -> str:
    base = f"http://127.0.0.1:{upstream_port}"
    provider = "api_key: sk-upstream-bench-not-a-secret, timeout_s: 30"
    return f"""
providers:
  - {{slug: mock-plain, type: openai_compatible, base_url: {base}/plain/v1, {provider}}}
  - {{slug: mock-sse, type: openai_compatible, base_url: {base}/sse/v1, {provider}}}
  - {{slug: mock-missing, type: openai_compatible, base_url: {base}/missing/v1, {provider}}}
models:
  - name: bench-plain
    routes: [{{provider: mock-plain, upstream_model: gpt-4o-mini}}]
    pricing: {{input_per_mtok: 0.15, output_per_mtok: 0.60}}
  - name: bench-sse
    routes: [{{provider: mock-sse, upstream_model: gpt-4o-mini}}]
    pricing: {{input_per_mtok: 0.15, output_per_mtok: 0.60}}
  - name: bench-embed
    embedding: true
    routes: [{{provider: mock-plain, upstream_model: text-embedding-3-small}}]
  - name: bench-broken
    routes: [{{provider: mock-missing, upstream_model: gpt-4o-mini}}]
projects:
  - name: bench
    keys:
      - {{name: wrk, key: {BENCH_KEY}}}
      - {{name: limited, key: {LIMITED}, limits: {{rpm: {LIMITED_RPM}}}}}
"""


@dataclass
class Counts:
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    total: int = 0

    def add(self, kind: Kind, outcome: str, ok: bool) -> None:
        self.total += 1
        per = self.by_kind.setdefault(kind.name, {})
        per[outcome] = per.get(outcome, 0) + 1
        if not ok and len(self.unexpected) < 50:
            self.unexpected.append(f"{kind.name}: {outcome}")


async def _loop(
    session: aiohttp.ClientSession,
    url: str,
    start: int,
    stop_at: float,
    counts: Counts,
    every_s: float,
) -> None:
    """One client: the kinds of MIX in turn, a request every `every_s` at most."""
    turn = start
    next_at = time.monotonic()
    while (now := time.monotonic()) < stop_at:
        if next_at > now:
            await asyncio.sleep(next_at - now)
        next_at = max(next_at + every_s, time.monotonic() - 1.0)
        kind = MIX[turn % len(MIX)]
        turn += 1
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {kind.key}"}
        headers.update(kind.headers)
        try:
            async with session.post(url + kind.path, data=kind.body, headers=headers) as answer:
                body = await answer.read()
                ok = answer.status in kind.allowed
                if ok and answer.status == 200 and kind.ends_with is not None:
                    ok = body.endswith(kind.ends_with) and b'"error"' not in body
                    outcome = "200" if ok else "200-incomplete"
                else:
                    outcome = str(answer.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            ok, outcome = False, type(exc).__name__
        counts.add(kind, outcome, ok)


@dataclass
class Sample:
    t_s: float
    rss_mib: float
    requests: int


async def _sample(
    system: System, stop_at: float, every_s: float, counts: Counts, samples: list[Sample]
) -> None:
    started = time.monotonic()
    while True:
        now = time.monotonic()
        rss = memory_kb(system.pids(), "VmRSS") / 1024
        samples.append(Sample(round(now - started, 1), round(rss, 1), counts.total))
        if now >= stop_at:
            return
        if len(samples) % max(1, int(60 / every_s)) == 0:
            print(f"  {now - started:6.0f} s  {rss:7.1f} MiB  {counts.total} requests", flush=True)
        await asyncio.sleep(min(every_s, max(0.0, stop_at - now)))


async def _drive(system: System, args: argparse.Namespace) -> tuple[Counts, list[Sample]]:
    counts, samples = Counts(), list[Sample]()
    stop_at = time.monotonic() + args.duration_s
    url = f"http://127.0.0.1:{system.port}"
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        every_s = args.concurrency / args.rate if args.rate > 0 else 0.0
        loops = [_loop(session, url, n, stop_at, counts, every_s) for n in range(args.concurrency)]
        await asyncio.gather(_sample(system, stop_at, args.sample_s, counts, samples), *loops)
    return counts, samples


def _median_between(samples: list[Sample], start_s: float, end_s: float) -> float:
    values = [s.rss_mib for s in samples if start_s <= s.t_s <= end_s]
    return statistics.median(values) if values else float("nan")


def _slope_mib_per_hour(samples: list[Sample]) -> float:
    if len(samples) < 2:
        return 0.0
    xs = [s.t_s for s in samples]
    ys = [s.rss_mib for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 3600


def verdict(samples: list[Sample], counts: Counts, args: argparse.Namespace) -> dict[str, Any]:
    """The figures and whether the run passes."""
    window = min(300.0, (args.duration_s - args.warmup_s) / 3)
    after = [s for s in samples if s.t_s >= args.warmup_s]
    early = _median_between(samples, args.warmup_s, args.warmup_s + window)
    late = _median_between(samples, args.duration_s - window, args.duration_s + 60)
    peak = max(s.rss_mib for s in samples)
    growth = late - early
    failures = []
    if peak > args.max_rss_mib:
        failures.append(f"peak RSS {peak:.1f} MiB above the ceiling of {args.max_rss_mib} MiB")
    if growth > args.max_growth_mib:
        failures.append(
            f"RSS grew {growth:.1f} MiB after warm-up (limit {args.max_growth_mib} MiB)"
        )
    if counts.unexpected:
        failures.append(f"unexpected answers: {counts.unexpected[:5]}")
    return {
        "start_rss_mib": samples[0].rss_mib,
        "warm_rss_mib": early,
        "end_rss_mib": late,
        "peak_rss_mib": peak,
        "growth_after_warmup_mib": round(growth, 1),
        "slope_after_warmup_mib_per_hour": round(_slope_mib_per_hour(after), 2),
        "failures": failures,
        "passed": not failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="llmrelay soak: mixed traffic, memory watched")
    parser.add_argument("--duration-s", type=float, default=1800.0)
    parser.add_argument("--warmup-s", type=float, default=300.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--rate", type=float, default=300.0, help="requests per second in all (0: flat out)"
    )
    parser.add_argument("--max-rss-mib", type=float, default=400.0, help="memory ceiling")
    parser.add_argument(
        "--max-growth-mib", type=float, default=16.0, help="allowed growth after warm-up"
    )
    parser.add_argument("--keep-temp", action="store_true")
    args = parser.parse_args()
    if args.warmup_s >= args.duration_s:
        parser.error("--warmup-s must be shorter than --duration-s")
    os.sched_setaffinity(0, {int(LOADGEN_CORE)})
    folder = Path(tempfile.mkdtemp(prefix="llmrelay-soak-"))
    load_before = os.getloadavg()
    with upstream(folder, ("plain", "sse")) as nginx:
        (folder / "llmrelay.yaml").write_text(config(nginx.port))
        port = free_port()
        system = System("llmrelay", port, {}, folder / "llmrelay.log")
        command = [venv_program("llmrelay"), "serve", "--config", str(folder / "llmrelay.yaml")]
        env = {**os.environ, "LLMRELAY_DATABASE_URL": f"sqlite:///{folder / 'soak.db'}"}
        system.launch([*command, "--port", str(port)], env, folder, "/readyz")
        try:
            cpu_before = cpu_seconds(system.pids())
            print(f"soak: {args.duration_s:.0f} s, concurrency {args.concurrency}", flush=True)
            counts, samples = asyncio.run(_drive(system, args))
            cpu = cpu_seconds(system.pids()) - cpu_before
        finally:
            system.stop()
    result = {
        "kind": "soak",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python -m bench.soak", *sys.argv[1:]]),
        "duration_s": args.duration_s,
        "warmup_s": args.warmup_s,
        "concurrency": args.concurrency,
        "rate_asked": args.rate,
        "requests": counts.total,
        "requests_per_s": round(counts.total / args.duration_s, 1),
        "gateway_cpu_s": round(cpu, 1),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "by_kind": counts.by_kind,
        **verdict(samples, counts, args),
        "samples": [vars(s) for s in samples],
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=1))
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=1))
    print(f"results: {out}")
    if not args.keep_temp:
        shutil.rmtree(folder, ignore_errors=True)
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()

"""What prepaid billing costs a request, on SQLite and PostgreSQL
(`python -m bench.run --prepaid`).

1. The transactions alone, in process: a reservation (`ledger.reserve`) and a settle
   (`ledger.settle`), each one transaction, timed one after another (latency) and with 16
   at once on one wallet (throughput: they serialise on the wallet's row), with the CPU time
   this process spent per transaction; then the same pairs through a wallet lease
   (billing/allowance.py: admitted in memory, settled in batches by the lease writer), 16
   at once, with the CPU per pair (the writer's transactions included) and the number of
   transactions they took.
2. A request through `llmrelay serve` (the built-in mock provider, so the provider costs
   nothing): the same key with its tenant prepaid and not, in alternating rounds, one client
   at a time and 16 at once; latency percentiles and requests per second. The prepaid arm
   waits for its reservation before the provider call; its settle is queued, not awaited.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.exc import OperationalError

from bench.procs import free_port, stop_process
from llmrelay.billing import ledger
from llmrelay.store import migrate
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.db import create_engine, session_factory

ADMIN = "bench-admin-token-0123456789abcdef"
KEY = "sk-bench-prepaid-key-0123456789abcdef"
TRANSACTIONS = int(os.environ.get("BENCH_PREPAID_TRANSACTIONS", "2000"))
CONCURRENT = 16
REQUESTS = 1000
ROUNDS = int(os.environ.get("BENCH_PREPAID_ROUNDS", "4"))
#: Reserve-and-settle pairs through a wallet lease (in process).
LEASED = 20_000
CONFIG = f"""
providers: [{{slug: mock, type: mock}}]
models: [{{name: m, routes: [{{provider: mock, upstream_model: echo}}],
          pricing: {{input_per_mtok: 1, output_per_mtok: 2}}}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
BODY = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hello there"}]}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3),
    }


async def _transactions(url: str) -> dict[str, Any]:
    engine = create_engine(url, pool_size=CONCURRENT, max_overflow=0) if "postgres" in url else (
        create_engine(url)
    )  # fmt: skip
    try:
        await migrate.upgrade(engine)
        async with session_factory(engine).begin() as session:
            tenant = (await ensure_default_tenant(session)).id
        async with engine.begin() as conn:
            await ledger.ensure_wallet(conn, tenant)
            await ledger.credit(conn, tenant, 10**15, kind="topup", key="bench")
        timings: dict[str, list[float]] = {"reserve": [], "settle": []}
        cpu = {"reserve": 0.0, "settle": 0.0}
        for n in range(TRANSACTIONS):
            for kind in ("reserve", "settle"):
                started, process = time.perf_counter(), time.process_time()
                async with engine.begin() as conn:
                    if kind == "reserve":
                        await ledger.reserve(conn, tenant, f"seq-{n}", 5_000)
                    else:
                        await ledger.settle(conn, f"seq-{n}", 1_234)
                timings[kind].append(time.perf_counter() - started)
                cpu[kind] += time.process_time() - process

        async def worker(w: int) -> None:
            for n in range(TRANSACTIONS // CONCURRENT):
                async with engine.begin() as conn:
                    await ledger.reserve(conn, tenant, f"par-{w}-{n}", 5_000)
                async with engine.begin() as conn:
                    await ledger.settle(conn, f"par-{w}-{n}", 1_234)

        started = time.perf_counter()
        try:
            await asyncio.gather(*(worker(w) for w in range(CONCURRENT)))
        except OperationalError as failed:  # SQLite's 30 s lock wait passed on a saturated machine
            print("concurrent transactions failed:", str(failed)[:200], flush=True)
        elapsed = time.perf_counter() - started
        pairs = CONCURRENT * (TRANSACTIONS // CONCURRENT)
        return (
            {
                kind: {**_percentiles(samples), "cpu_us": round(cpu[kind] / TRANSACTIONS * 1e6, 1)}
                for kind, samples in timings.items()
            }
            | {"concurrent_pairs_per_s": round(pairs / elapsed, 1)}
            | await _leased(engine, tenant)
        )
    finally:
        await engine.dispose()


async def _leased(engine: Any, tenant: str) -> dict[str, Any]:
    """Reserve-and-settle pairs through the wallet's lease, 16 at once: admitted in memory,
    settled by the lease writer in batches; timed until every settle is written."""
    try:
        from llmrelay.billing.allowance import Leases
        from llmrelay.billing.lease_writer import LeaseWriter
    except ImportError:  # a tree without leases
        return {}
    leases = Leases(engine, owner="bench")
    writer = LeaseWriter(leases)
    writer.start()
    try:

        async def worker(w: int) -> None:
            for n in range(LEASED // CONCURRENT):
                request_id = f"lease-{w}-{n}"
                if not leases.try_admit(tenant, request_id, 5_000, None, None):
                    await leases.admit(tenant, request_id, 5_000, None, None)
                await asyncio.sleep(0)  # the provider call
                leases.end(request_id, 1_234)

        started, process = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker(w) for w in range(CONCURRENT)))
        admitted = time.perf_counter() - started
        while leases.ended or writer.settled < LEASED:  # noqa: ASYNC110 (a bench's poll)
            await asyncio.sleep(0.01)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - process
        return {
            "leased": {
                "pairs_per_s": round(LEASED / elapsed, 1),
                "admitted_per_s": round(LEASED / admitted, 1),
                "cpu_us": round(cpu / LEASED * 1e6, 1),
                "transactions": writer.rounds + leases.grants,
            }
        }
    finally:
        await writer.stop()


def _serve(folder: Path, url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "LLMRELAY_DATABASE_URL": url,
        "LLMRELAY_ADMIN_TOKEN": ADMIN,
        "LLMRELAY_SNAPSHOT_POLL_S": "0.2",
        "LLMRELAY_LOG_LEVEL": "warning",
    }
    config = folder / "prepaid.yaml"
    config.write_text(CONFIG)
    if not url.startswith("sqlite"):
        subprocess.run([sys.executable, "-m", "llmrelay", "migrate"], env=env, check=True)
    command = [sys.executable, "-m", "llmrelay", "serve", "--config", str(config)]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env=env,
        cwd=folder,
        stdout=(folder / "serve.log").open("ab"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + float(os.environ.get("BENCH_READY_S", "180"))
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    stop_process(process)
    raise RuntimeError("llmrelay did not start")


def _set_prepaid(base: str, on: bool) -> None:
    with httpx.Client(
        base_url=f"{base}/api/admin", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120
    ) as api:
        tenant = api.get("/tenants").json()["data"][0]["id"]
        answer = api.patch(
            f"/billing/{tenant}/wallet", json={"prepaid": on}, headers={"If-Match": "*"}
        )
        answer.raise_for_status()
        balance = api.get(f"/billing/{tenant}/wallet").json()["balance_micros"]
        if on and balance < 10**12:
            api.post(
                f"/billing/{tenant}/adjustments",
                json={
                    "amount_micros": 10**12,
                    "reason": "bench",
                    "adjustment_id": f"b{time.time_ns()}",
                },
            ).raise_for_status()
    # Wait for the snapshot: a prepaid request reserves (its ledger grows).
    time.sleep(1.0)


def _cpu_s(pid: int) -> float:
    """The process's user + system CPU time so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _load(base: str, concurrency: int, count: int, pid: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEY}"}
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=base, headers=headers, limits=limits, timeout=120
    ) as client:

        async def one() -> None:
            started = time.perf_counter()
            answer = await client.post("/v1/chat/completions", json=BODY)
            answer.raise_for_status()
            latencies.append(time.perf_counter() - started)

        async def worker() -> None:
            for _ in range(count // concurrency):
                await one()

        for _ in range(20):
            await one()
        latencies.clear()
        started, cpu = time.perf_counter(), _cpu_s(pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - started, _cpu_s(pid) - cpu
    return {
        **_percentiles(latencies),
        "rps": round(len(latencies) / elapsed, 1),
        "cpu_ms": round(cpu / len(latencies) * 1000, 3),
    }


def _requests(folder: Path, url: str) -> dict[str, Any]:
    process, base = _serve(folder, url)
    try:
        rounds: dict[str, list[dict[str, Any]]] = {"off": [], "prepaid": []}
        for n in range(ROUNDS):
            for arm in ("off", "prepaid") if n % 2 == 0 else ("prepaid", "off"):
                _set_prepaid(base, arm == "prepaid")
                rounds[arm].append(
                    {
                        "c1": asyncio.run(_load(base, 1, REQUESTS // 2, process.pid)),
                        f"c{CONCURRENT}": asyncio.run(
                            _load(base, CONCURRENT, REQUESTS, process.pid)
                        ),
                    }
                )
        return {
            arm: {
                level: {
                    metric: statistics.median(r[level][metric] for r in results)
                    for metric in ("p50_ms", "p99_ms", "rps", "cpu_ms")
                }
                for level in ("c1", f"c{CONCURRENT}")
            }
            for arm, results in rounds.items()
        }
    finally:
        stop_process(process)


def bench_prepaid(folder: Path) -> dict[str, Any]:
    from tests.support.databases import create_postgres_database, drop_postgres_database

    data: dict[str, Any] = {"backends": {}}
    backends = os.environ.get("BENCH_PREPAID_BACKENDS", "sqlite,postgresql").split(",")
    for backend in backends:
        transactions: dict[str, Any] = {}
        if os.environ.get("BENCH_PREPAID_TX", "1") != "0":
            if backend == "postgresql":
                url = asyncio.run(create_postgres_database())
            else:
                url = f"sqlite:///{folder / 'prepaid-transactions.db'}"
            try:
                transactions = asyncio.run(_transactions(url))
            finally:
                if backend == "postgresql":
                    asyncio.run(drop_postgres_database(url))
        if os.environ.get("BENCH_PREPAID_SERVE", "1") == "0":
            data["backends"][backend] = {"transactions": transactions, "requests": {}}
            print(backend, data["backends"][backend], flush=True)
            continue
        if backend == "postgresql":
            url = asyncio.run(create_postgres_database())
        else:
            url = f"sqlite:///{folder / 'prepaid-serve.db'}"
        try:
            requests = _requests(folder, url)
        finally:
            if backend == "postgresql":
                asyncio.run(drop_postgres_database(url))
        data["backends"][backend] = {"transactions": transactions, "requests": requests}
        print(backend, data["backends"][backend], flush=True)
    return data


def prepaid_markdown(data: dict[str, Any]) -> str:
    lines = [
        "| backend | reserve p50 / p99 | settle p50 / p99 | CPU per reserve / settle "
        "| 16 at once: pairs/s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for backend, found in data["backends"].items():
        t = found["transactions"]
        if not t:
            continue
        lines.append(
            f"| {backend} | {t['reserve']['p50_ms']} / {t['reserve']['p99_ms']} ms "
            f"| {t['settle']['p50_ms']} / {t['settle']['p99_ms']} ms "
            f"| {t['reserve']['cpu_us']} / {t['settle']['cpu_us']} µs "
            f"| {t['concurrent_pairs_per_s']} |"
        )
        leased = t.get("leased")
        if leased:
            lines.append(
                f"| {backend}, lease | - | - | {leased['cpu_us']} µs per pair "
                f"| {leased['pairs_per_s']} ({leased['transactions']} transactions "
                f"for {LEASED} pairs) |"
            )
    lines += [
        "",
        f"| backend | arm | c=1 p50 / p99 | c=1 req/s | c={CONCURRENT} p50 / p99 "
        f"| c={CONCURRENT} req/s | CPU ms per request c=1 / c={CONCURRENT} |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for backend, found in data["backends"].items():
        for arm, levels in found["requests"].items():
            one, many = levels["c1"], levels[f"c{CONCURRENT}"]
            lines.append(
                f"| {backend} | {arm} | {one['p50_ms']} / {one['p99_ms']} ms | {one['rps']} "
                f"| {many['p50_ms']} / {many['p99_ms']} ms | {many['rps']} "
                f"| {one['cpu_ms']} / {many['cpu_ms']} |"
            )
    return "\n".join(lines)

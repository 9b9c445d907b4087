"""The usage API over millions of records: seed N synthetic request records (30 days, 5
projects, 20 keys, 6 models, 3 providers) into SQLite and PostgreSQL, start `llmrelay serve`
on each, and time the summary, time-series and request-list endpoints as an operator would
call them. `python -m bench.run --usage-api [--rows N]`."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.procs import free_port, stop_process
from llmrelay.gateway.call import RECORD_COLUMNS

ADMIN = "bench-admin-token-0123456789abcdef"
PROJECTS = [f"bench-p{i}" for i in range(5)]
MODELS = ["gpt-4o", "gpt-4o-mini", "claude-sonnet", "claude-haiku", "gemini-flash", "embed"]
PROVIDERS = ["openai-main", "anthropic-main", "gemini-main"]
DAYS = 30


def _keys(project: str) -> str:
    return ", ".join(
        f"{{name: k{j}, key: sk-bench-{project}-key{j}-0123456789abcdef}}" for j in range(4)
    )


def _config() -> str:
    projects = "\n".join(f"  - {{name: {p}, keys: [{_keys(p)}]}}" for p in PROJECTS)
    return f"""
providers: [{{slug: openai-main, type: openai_compatible, base_url: "http://127.0.0.1:9/v1"}}]
models: [{{name: gpt-4o, routes: [{{provider: openai-main, upstream_model: gpt-4o}}]}}]
projects:
{projects}
"""


def _rows(count: int, ids: dict[str, list[str]], seed: int = 7) -> list[tuple[Any, ...]]:
    """Synthetic records, oldest first, spread evenly over DAYS."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    start = now - timedelta(days=DAYS)
    step = timedelta(days=DAYS) / count
    projects = list(ids)
    rows = []
    for i in range(count):
        project = projects[i % len(projects)]
        key = ids[project][(i // 5) % len(ids[project])]
        prompt = rng.randint(20, 4000)
        cached = prompt // 2 if i % 3 == 0 else 0
        output = rng.randint(1, 800)
        status = 200 if i % 50 else 502
        cost = prompt * 2 + output * 8
        latency = rng.lognormvariate(6.0, 0.6)
        rows.append(
            (
                f"req_bench{i:012d}",
                start + step * i,
                "default",
                project,
                key,
                "chat.completions",
                MODELS[i % len(MODELS)],
                PROVIDERS[i % len(PROVIDERS)],
                MODELS[i % len(MODELS)],
                i % 2 == 0,
                status,
                None if status == 200 else "upstream_error",
                latency,
                latency / 3,
                prompt,
                output,
                1,
                None,
                None,
                cost,
                "openai",
                prompt - cached,
                cached,
                0,
                output,
                0,
                "reported",
            )
        )
    return rows


#: The record columns the synthetic rows fill, in RECORD_COLUMNS order.
COLUMNS = RECORD_COLUMNS[: RECORD_COLUMNS.index("usage_source") + 1]


def _llmrelay(*args: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "llmrelay", *args], env=env, check=True, capture_output=True
    )


async def _seed_postgres(url: str, rows: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        ids: dict[str, list[str]] = {}
        for project_id, key_id in await conn.fetch(
            "SELECT p.id, k.id FROM projects p JOIN api_keys k ON k.project_id = p.id"
        ):
            ids.setdefault(project_id, []).append(key_id)
        for offset in range(0, rows, 200_000):
            chunk = _rows(min(200_000, rows - offset), ids, seed=offset)
            chunk = [(f"{r[0]}-{offset}", *r[1:]) for r in chunk]
            await conn.copy_records_to_table("request_records", records=chunk, columns=COLUMNS)
        await conn.execute("ANALYZE request_records")
        # As the recorder does for the batches it writes: every hour with records is dirty.
        await conn.execute(
            "INSERT INTO usage_rollup_dirty (hour, version) SELECT DISTINCT date_trunc('hour',"
            " created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 1 FROM request_records"
            " ON CONFLICT DO NOTHING"
        )
    finally:
        await conn.close()


def _seed_sqlite(path: Path, rows: int) -> None:
    with sqlite3.connect(path) as db:
        ids: dict[str, list[str]] = {}
        for project_id, key_id in db.execute(
            "SELECT p.id, k.id FROM projects p JOIN api_keys k ON k.project_id = p.id"
        ):
            ids.setdefault(project_id, []).append(key_id)
        marks = ", ".join("?" * len(COLUMNS))
        sql = f"INSERT INTO request_records ({', '.join(COLUMNS)}) VALUES ({marks})"
        for offset in range(0, rows, 200_000):
            chunk = _rows(min(200_000, rows - offset), ids, seed=offset)
            db.executemany(
                sql,
                [
                    (f"{r[0]}-{offset}", r[1].strftime("%Y-%m-%d %H:%M:%S.%f"), *r[2:])
                    for r in chunk
                ],
            )
        db.execute("ANALYZE")
        db.execute(
            "INSERT OR IGNORE INTO usage_rollup_dirty (hour, version) SELECT DISTINCT"
            " substr(created_at, 1, 13) || ':00:00.000000', 1 FROM request_records"
        )


def _time(
    client: httpx.Client, path: str, params: dict[str, str], repeat: int = 5
) -> dict[str, Any]:
    client.get(path, params=params).raise_for_status()  # warm
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = client.get(path, params=params)
        took.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
    return {"path": path, "params": params, "median_ms": round(statistics.median(took), 1)}


def _queries() -> list[tuple[str, dict[str, str]]]:
    now = datetime.now(UTC)
    day = (now - timedelta(days=1)).isoformat()
    month = (now - timedelta(days=DAYS)).isoformat()
    return [
        ("/usage/summary", {}),
        ("/usage/summary", {"project": PROJECTS[0], "since": month}),
        ("/usage/summary", {"project": PROJECTS[0], "key": "k1", "since": day}),
        ("/usage/summary", {"model": "gpt-4o", "since": day}),
        ("/usage/timeseries", {"bucket": "hour", "group_by": "model", "since": day}),
        ("/usage/timeseries", {"bucket": "day", "group_by": "project", "since": month}),
        ("/requests", {"project": PROJECTS[1], "limit": "50"}),
    ]


def bench_usage_api(folder: Path, rows: int) -> dict[str, Any]:
    from tests.support.databases import create_postgres_database, drop_postgres_database

    results: dict[str, Any] = {"rows": rows, "backends": {}}
    config = folder / "usage.yaml"
    config.write_text(_config())
    for backend in ("postgresql", "sqlite"):
        url = (
            asyncio.run(create_postgres_database())
            if backend == "postgresql"
            else f"sqlite:///{folder / 'usage.db'}"
        )
        env = {"LLMRELAY_DATABASE_URL": url, "LLMRELAY_ADMIN_TOKEN": ADMIN, "PATH": "/usr/bin:/bin"}
        try:
            _llmrelay("migrate", env=env)
            _llmrelay("apply", str(config), env=env)
            started = time.monotonic()
            print(f"{backend}: seeding {rows} records ...", flush=True)
            if backend == "postgresql":
                asyncio.run(_seed_postgres(url, rows))
            else:
                _seed_sqlite(folder / "usage.db", rows)
            seeded = round(time.monotonic() - started, 1)
            print(f"  seeded in {seeded} s; starting llmrelay (it rolls the hours up) ...")
            port = free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "llmrelay", "serve", "--port", str(port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                base = f"http://127.0.0.1:{port}"
                for _ in range(3000):  # the start rolls a month of hours up
                    try:
                        if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)
                headers = {"Authorization": f"Bearer {ADMIN}"}
                with httpx.Client(
                    base_url=f"{base}/api/admin", headers=headers, timeout=120
                ) as client:
                    counted = client.get("/usage/summary").json()["requests"]
                    assert counted == rows, f"the summary counted {counted} of {rows} records"
                    timings = [_time(client, path, params) for path, params in _queries()]
            finally:
                stop_process(process)
            for timing in timings:
                print(
                    f"  {timing['median_ms']:8.1f} ms  {timing['path']} {timing['params']}",
                    flush=True,
                )
            results["backends"][backend] = {"seed_s": seeded, "timings": timings}
        finally:
            if backend == "postgresql":
                asyncio.run(drop_postgres_database(url))
    return results


def markdown(data: dict[str, Any]) -> str:
    lines = [
        f"{data['rows']:,} records.",
        "",
        "| query | PostgreSQL ms | SQLite ms |",
        "| --- | --- | --- |",
    ]
    pg = data["backends"].get("postgresql", {}).get("timings", [])
    lite = data["backends"].get("sqlite", {}).get("timings", [])
    for a, b in zip(pg, lite, strict=False):
        shown = " ".join(
            f"{k}={v[:10] if k in ('since', 'until') else v}" for k, v in a["params"].items()
        )
        lines.append(f"| `{a['path']}` {shown} | {a['median_ms']} | {b['median_ms']} |")
    return "\n".join(lines)

"""A gateway with LLMRELAY_RECORD_RETENTION_DAYS deletes older records by itself."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.zygote import run_llmrelay

KEY = "retention-key-0123456789"


def test_old_records_are_deleted_and_new_ones_kept(tmp_path: Path, upstream: MockUpstream) -> None:
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models: [{{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    env = {"LLMRELAY_RECORD_RETENTION_DAYS": "30", "LLMRELAY_RETENTION_INTERVAL_S": "0.2"}
    gateway = GatewayProcess(tmp_path, config=config, env=env)
    migrated = run_llmrelay(
        ["migrate"],
        env=gateway.env,
    )
    assert migrated.returncode == 0, migrated.stderr
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        for request_id, age_days in (("ancient", 400), ("old", 31), ("recent", 29)):
            created = time.strftime(
                "%Y-%m-%d %H:%M:%S.000000", time.gmtime(time.time() - age_days * 86_400)
            )
            conn.execute(
                "INSERT INTO request_records (request_id, created_at, endpoint, stream,"
                " status_code, latency_ms, attempts, usage_source)"
                " VALUES (?, ?, 'chat.completions', 0, 200, 1.0, 1, 'none')",
                (request_id, created),
            )
    gateway.start()
    try:
        answer = httpx.post(
            f"{gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "today"},
            json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )
        assert answer.status_code == 200
        deadline = time.monotonic() + 10
        while True:
            with sqlite3.connect(path) as conn:
                kept = {row[0] for row in conn.execute("SELECT request_id FROM request_records")}
            if kept == {"recent", "today"} or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert kept == {"recent", "today"}
    finally:
        assert gateway.stop() == 0

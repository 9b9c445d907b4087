"""The gateway on PostgreSQL: `llmrelay migrate`, then `serve`, then a recorded request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import openai
import pytest

from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.zygote import run_llmrelay

pytestmark = pytest.mark.postgres
KEY = "postgres-e2e-key-0123456789"


def test_serve_on_postgres_records_the_request(
    pg_url: str,
    tmp_path: Path,
    upstream: MockUpstream,
    closing: Closing,
) -> None:
    env_db = {"LLMRELAY_DATABASE_URL": pg_url}
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}]
models: [{{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    refused = GatewayProcess(tmp_path, config=config, database_url=pg_url)
    with pytest.raises(RuntimeError, match="llmrelay migrate"):
        refused.start()  # PostgreSQL is never migrated implicitly by serve

    migrated = run_llmrelay(
        ["migrate"],
        env={**refused.env, **env_db},
    )
    assert migrated.returncode == 0, migrated.stderr
    process = GatewayProcess(tmp_path, config=config, database_url=pg_url).start()
    try:
        client = closing(openai.OpenAI(api_key=KEY, base_url=process.base_url, max_retries=0))
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "on postgres"}]
        )
        assert raw.parse().choices[0].message.content == "on postgres"
        request_id = raw.headers["x-request-id"]
    finally:
        assert process.stop() == 0
    row = asyncio.run(_fetch_record(pg_url, request_id))
    assert row is not None
    assert (row["virtual_model"], row["provider"], row["status_code"]) == ("chat", "up", 200)


async def _fetch_record(url: str, request_id: str) -> asyncpg.Record | None:
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + 5
        while True:
            row = await conn.fetchrow(
                "SELECT * FROM request_records WHERE request_id = $1", request_id
            )
            if row is not None or time.monotonic() > deadline:
                return row
            await asyncio.sleep(0.1)
    finally:
        await conn.close()

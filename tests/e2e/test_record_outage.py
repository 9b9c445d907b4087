"""A PostgreSQL outage under a running gateway: every request is still answered, its record
waits in the local spool, and reaches the database once it is back (or, when the gateway
is stopped meanwhile, once the next one starts)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import orjson
import pytest

from llmrelay.gateway.call import RECORD_COLUMNS
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.postgres_server import PostgresServer

pytestmark = pytest.mark.e2e
KEY = "outage-e2e-key-0123456789"


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.remove()


def _gateway(folder: Path, upstream: MockUpstream, postgres: PostgresServer) -> GatewayProcess:
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}]
models: [{{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    return GatewayProcess(
        folder,
        config=config,
        database_url=postgres.url,
        env={"LLMRELAY_SPOOL_DIR": str(folder / "spool")},
    )


def _migrate(gateway: GatewayProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmrelay", "migrate"],
        env=gateway.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _send(gateway: GatewayProcess, request_id: str) -> int:
    answer = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": request_id},
        json={"model": "chat", "messages": [{"role": "user", "content": "kept"}]},
        timeout=10,
    )
    return answer.status_code


def _metric(gateway: GatewayProcess, name: str) -> float:
    text = httpx.get(f"{gateway.url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in /metrics")


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.1)


def _spool_files(gateway: GatewayProcess) -> list[Path]:
    return sorted((gateway.folder / "spool").glob("records-*.jsonl"))


def _spooled_ids(gateway: GatewayProcess) -> list[str]:
    """The request ids of the record lines in the spool files (the header line skipped)."""
    at = RECORD_COLUMNS.index("request_id")
    ids = []
    for path in _spool_files(gateway):
        for line in path.read_bytes().splitlines():
            item = orjson.loads(line)
            if isinstance(item, list) and item[0] == "r":
                ids.append(item[1][at])
    return ids


async def _counts(url: str, ids: list[str]) -> dict[str, int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT request_id, count(*) AS n FROM request_records "
            "WHERE request_id = ANY($1::text[]) GROUP BY request_id",
            ids,
        )
    finally:
        await conn.close()
    return {row["request_id"]: row["n"] for row in rows}


def _all_recorded(postgres: PostgresServer, ids: list[str]) -> dict[str, int]:
    """Once every id is in request_records (polled): how often each is there."""
    found: dict[str, int] = {}

    def complete() -> bool:
        found.clear()
        found.update(asyncio.run(_counts(postgres.url, ids)))
        return len(found) == len(ids)

    _until(complete, f"all {len(ids)} records in the database")
    return found


#: How long the database stays down while requests keep coming.
OUTAGE_S = 60.0


def test_a_database_outage_fails_no_request_and_loses_no_record(
    postgres: PostgresServer, upstream: MockUpstream, tmp_path: Path
) -> None:
    gateway = _gateway(tmp_path, upstream, postgres)
    _migrate(gateway)
    gateway.start()
    try:
        before = [f"before-{i}" for i in range(5)]
        assert [_send(gateway, rid) for rid in before] == [200] * 5
        _all_recorded(postgres, before)

        postgres.stop()
        assert httpx.get(f"{gateway.url}/readyz", timeout=5).status_code == 503
        during: list[str] = []
        outage_ends = time.monotonic() + OUTAGE_S  # the figure: a minute
        while time.monotonic() < outage_ends:
            during.append(f"during-{len(during)}")
            assert _send(gateway, during[-1]) == 200
            time.sleep(0.02)
        # Every record of the outage went through the spool: on disk, counted, none lost.
        _until(
            lambda: _metric(gateway, "llmrelay_records_spooled_total") == len(during),
            "the outage's records spooled",
        )
        assert sorted(_spooled_ids(gateway)) == sorted(during)
        assert _metric(gateway, "llmrelay_record_spool_rows") == len(during)
        assert _metric(gateway, "llmrelay_record_spool_bytes") > 0

        postgres.start()
        everything = before + during
        assert _all_recorded(postgres, everything) == dict.fromkeys(everything, 1)
        _until(lambda: not _spool_files(gateway), "the replayed spool files deleted")
        assert _metric(gateway, "llmrelay_record_spool_rows") == 0
        assert _metric(gateway, "llmrelay_records_dropped_total") == 0

        after = [f"after-{i}" for i in range(3)]
        assert [_send(gateway, rid) for rid in after] == [200] * 3
        _all_recorded(postgres, after)
        assert _metric(gateway, "llmrelay_records_spooled_total") == len(during)
    finally:
        assert gateway.stop() == 0, gateway.logs()
    assert "record_batch_lost" not in gateway.logs()


def test_a_gateway_stopped_during_the_outage_leaves_its_records_to_the_next(
    postgres: PostgresServer, upstream: MockUpstream, tmp_path: Path
) -> None:
    first = _gateway(tmp_path, upstream, postgres)
    _migrate(first)
    first.start()
    try:
        postgres.stop()
        ids = [f"left-{i}" for i in range(40)]
        assert [_send(first, rid) for rid in ids] == [200] * len(ids)
    finally:
        assert first.stop() == 0, first.logs()  # SIGTERM while the database is down
    assert "record_batch_lost" not in first.logs()
    assert sorted(_spooled_ids(first)) == sorted(ids)

    postgres.start()
    second = _gateway(tmp_path, upstream, postgres).start()
    try:
        assert _all_recorded(postgres, ids) == dict.fromkeys(ids, 1)
        _until(lambda: not _spool_files(second), "the replayed spool files deleted")
    finally:
        assert second.stop() == 0, second.logs()

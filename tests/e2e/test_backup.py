"""`llmrelay backup` of a serving gateway's SQLite database, and `llmrelay restore` of it
into a new machine's place: the keys, config and records come back, and the gateway serves."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
from pathlib import Path

import httpx

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.zygote import run_llmrelay

KEY = "backup-key-0123456789abcdef"


def _config(upstream: MockUpstream) -> str:
    return f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}, api_key: sk-up}}]
models: [{{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""


def _llmrelay(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_llmrelay(
        list(args),
        env=gateway.env,
        cwd=gateway.folder,
    )


def _chat(gateway: GatewayProcess) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )


def test_backup_while_serving_then_restore(tmp_path: Path, upstream: MockUpstream) -> None:
    gateway = GatewayProcess(tmp_path, config=_config(upstream)).start()
    target = tmp_path / "backup.db"
    try:
        ids = [_chat(gateway).headers["x-request-id"] for _ in range(20)]
        assert len(gateway.records(ids)) == 20
        # Requests keep coming while the backup runs.
        stop = threading.Event()

        def traffic() -> None:
            while not stop.is_set():
                assert _chat(gateway).status_code == 200

        thread = threading.Thread(target=traffic)
        thread.start()
        try:
            done = _llmrelay(gateway, "backup", str(target))
        finally:
            stop.set()
            thread.join()
        assert done.returncode == 0, done.stderr
        assert "schema revision" in done.stdout and "LLMRELAY_SECRET_KEY" in done.stdout
        refused = _llmrelay(gateway, "backup", str(target))
        assert refused.returncode == 1 and "exists" in refused.stderr
        in_use = _llmrelay(gateway, "restore", str(target))
        assert in_use.returncode == 1 and "in use" in in_use.stderr
    finally:
        assert gateway.stop() == 0, gateway.logs()

    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        backed_up = conn.execute("SELECT count(*) FROM request_records").fetchone()[0]
    assert backed_up >= 20

    # The database is lost; the backup is restored in its place.
    database = Path(gateway.database_url.removeprefix("sqlite:///"))
    for leftover in database.parent.glob(database.name + "*"):
        if leftover.suffix in (".db", ".db-wal", ".db-shm") or leftover == database:
            leftover.unlink()
    database.write_bytes(b"garbage, not a database")
    restored = _llmrelay(gateway, "restore", str(target))
    assert restored.returncode == 0, restored.stderr
    assert "kept as" in restored.stdout
    assert list(database.parent.glob(database.name + ".before-restore-*"))

    again = GatewayProcess(tmp_path, database_url=gateway.database_url).start()
    try:
        answer = _chat(again)
        assert answer.status_code == 200, answer.text
        assert len(again.records(ids)) == 20
    finally:
        assert again.stop() == 0, again.logs()


def test_restore_refuses_what_is_not_a_backup(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path)
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"not sqlite")
    done = _llmrelay(gateway, "restore", str(bogus))
    assert done.returncode == 1 and "not a readable SQLite database" in done.stderr
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    done = _llmrelay(gateway, "restore", str(empty))
    assert done.returncode == 1 and "not an llmrelay database" in done.stderr
    postgres = _llmrelay(
        GatewayProcess(tmp_path, database_url="postgresql://u@127.0.0.1:1/db"), "backup", "x"
    )
    assert postgres.returncode == 2 and "pg_dump" in postgres.stderr


def test_restore_refuses_a_schema_it_does_not_know(tmp_path: Path) -> None:
    future = tmp_path / "future.db"
    with sqlite3.connect(future) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32))")
        conn.execute("INSERT INTO alembic_version VALUES ('9999')")
        conn.execute("CREATE TABLE request_records (id INTEGER)")
    done = _llmrelay(GatewayProcess(tmp_path), "restore", str(future))
    assert done.returncode == 1 and "does not know" in done.stderr

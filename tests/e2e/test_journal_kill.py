"""A prepaid gateway killed with `kill -9` under load loses no record and no charge of an
answer it served (issue 32 item 4 (b), gateway/journal.py), on both databases.

The ids are the gateway's own, so every request is admitted against the wallet's lease in
memory and settled by the lease writer's batches (up to a second of them), its record by the
recorder's (a fifth of a second): at the kill both batches hold answers already sent. The
restarted process replays the dead one's journal: every 200 the client got has its record
and exactly one charge of that record's cost, and once the dead lease is reclaimed (a short
lease TTL here) the wallet is what its ledger says, nothing reserved.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.billing import ADMIN_TOKEN, BillingDb, admin, eventually, make_prepaid
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.zygote import run_llmrelay

pytestmark = pytest.mark.e2e
KEY = "journal-kill-key-0123456789"
BODY = {
    "model": "quick",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "served, then killed"}],
}
#: Served answers before the kill: enough that both writers' batches hold some.
SERVED_BEFORE_KILL = 150
CONCURRENCY = 16


def _config(upstream: MockUpstream) -> str:
    return f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models:
  - name: quick
    routes: [{{provider: up, upstream_model: slow-20}}]
    pricing: {{input_per_mtok: 1500, output_per_mtok: 7250}}
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""


class _Load:
    """Requests CONCURRENCY at a time from a thread of its own until the gateway dies; each
    answer as (status, request id); 0 for a request that got no answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[tuple[int, str]] = []
        self.served = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=CONCURRENCY)
        async with httpx.AsyncClient(base_url=self.url, timeout=30, limits=limits) as client:
            await asyncio.gather(*(self._loop(client) for _ in range(CONCURRENCY)))

    async def _loop(self, client: httpx.AsyncClient) -> None:
        headers = {"Authorization": f"Bearer {KEY}"}
        while True:
            try:
                answer = await client.post("/chat/completions", json=BODY, headers=headers)
            except httpx.HTTPError:
                self.answers.append((0, ""))
                return  # the gateway is dead
            self.answers.append((answer.status_code, answer.headers.get("x-request-id", "")))
            if sum(1 for status, _ in self.answers if status == 200) >= SERVED_BEFORE_KILL:
                self.served.set()

    def wait(self) -> list[tuple[int, str]]:
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "the load did not end after the kill"
        return self.answers


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_gateway_killed_under_load_keeps_every_served_answer_charged(
    backend: str, tmp_path: Path, upstream: MockUpstream, request: pytest.FixtureRequest
) -> None:
    database_url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    process = GatewayProcess(
        tmp_path,
        config=_config(upstream),
        database_url=database_url,
        env={
            "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
            # The dead process's lease is reclaimed TTL * 1.5 after its last renewal.
            "LLMRELAY_BILLING_LEASE_TTL_S": "4",
            "LLMRELAY_BILLING_RECONCILE_INTERVAL_S": "1",
        },
    )
    if database_url is not None:
        migrated = run_llmrelay(["migrate"], env=process.env)
        assert migrated.returncode == 0, migrated.stderr
    process.start()
    db = BillingDb(process.database_url)
    try:
        tenant = db.default_tenant()
        with admin(process.url) as api:
            make_prepaid(api, tenant, 10_000 * 1_000_000, "seed")

        def billed() -> bool:
            answer = httpx.post(
                f"{process.base_url}/chat/completions",
                json=BODY,
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            return db.reservation(answer.headers["x-request-id"]) is not None or bool(
                db.rows("SELECT id FROM wallet_leases WHERE tenant_id = $1", tenant)
            )

        eventually(billed, timeout_s=60, what="the tenant to be prepaid in the snapshot")

        load = _Load(process.base_url)
        assert load.served.wait(timeout=180), "the load was not served"
        assert process.kill() == -9
        answers = load.wait()
        served = {rid for status, rid in answers if status == 200}
        assert len(served) >= SERVED_BEFORE_KILL
        assert {status for status, _ in answers} <= {200, 0}, answers

        process.start()

        def records() -> dict[str, dict[str, Any]] | None:
            rows = db.rows(
                "SELECT request_id, cost_micros FROM request_records WHERE tenant_id = $1", tenant
            )
            found = {r["request_id"]: r for r in rows}
            return found if served <= found.keys() else None

        recorded = eventually(records, timeout_s=120, what="every served answer's record")

        def settled() -> dict[str, dict[str, Any]] | None:
            """The journal's settles are written after its records (same replay)."""
            rows = db.rows("SELECT * FROM reservations WHERE tenant_id = $1", tenant)
            found = {r["request_id"]: r for r in rows}
            return found if served <= found.keys() else None

        reservations = eventually(settled, timeout_s=120, what="every served answer's charge")
        for request_id in served:
            charged = reservations[request_id]
            assert charged["status"] == "settled", charged
            assert charged["charged_micros"] == recorded[request_id]["cost_micros"] > 0
        for request_id in served:  # one charge each, never two
            keys = [e for e in db.entries(tenant) if e["request_id"] == request_id]
            assert [e["kind"] for e in keys] == ["charge"], keys
        # The dead lease reclaimed: nothing reserved, and the wallet is its ledger.
        eventually(lambda: db.wallet(tenant)[1] == 0, timeout_s=120, what="the lease reclaimed")
        db.assert_balanced(tenant)
        # The restarted process took the dead one's journal (the test's premise: without
        # it, the batches the kill cut would have been lost).
        logs = process.logs()
        assert "journal_settles_written" in logs, logs[-3000:]
    finally:
        if process.process is not None:
            assert process.stop() == 0, process.logs()

"""A worker killed (SIGKILL) while its background responses were with the provider: `serve`
runs no jobs (LLMRELAY_JOBS_IN_PROCESS=false), a `llmrelay worker` process takes them and dies,
another takes over once the lease runs out. A response the provider runs in the background is
resumed by polling it (the provider saw one create call, and the response completes); one sent
through chat has no such handle, and fails `worker_lost` rather than reach the provider twice.
Each gets exactly one record. The tenant is prepaid: the resumed response is charged what
its record costs under the reservation the dead worker made, and the lost one's reservation
is kept (`metering_failed`) until reconciled, since the provider may have billed for it."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.billing import ADMIN_TOKEN, BillingDb, admin, eventually, make_prepaid
from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.worker_process import WorkerProcess

KEY = "e2e-worker-killed-key-0123456789"
PRICED = "{input_per_mtok: 1000, output_per_mtok: 2000}"


def config(upstream: MockUpstream) -> str:
    provider = f'base_url: "{upstream.base_url}", api_key: sk-worker-killed'
    return f"""
providers:
  - {{slug: oai, type: openai, {provider}}}
  - {{slug: compat, type: openai_compatible, {provider}}}
models:
  - name: slow-native
    routes: [{{provider: oai, upstream_model: slow-4000}}]
    pricing: {PRICED}
  - name: slow-chat
    routes: [{{provider: compat, upstream_model: slow-4000}}]
    pricing: {PRICED}
projects:
  - name: p
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {"LLMRELAY_JOBS_IN_PROCESS": "false", "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    yield from serving(tmp_path_factory.mktemp("killed"), config(upstream), env=env)


def _wait(check: object, what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_killed_workers_responses_are_resumed_never_sent_twice(
    gateway: GatewayProcess,
    upstream: MockUpstream,
    tmp_path: Path,
    closing: Closing,
) -> None:
    env = {"LLMRELAY_DATABASE_URL": gateway.database_url, "LLMRELAY_JOBS_LEASE_S": "2"}
    db = BillingDb(gateway.database_url)
    tenant = db.default_tenant()
    with admin(gateway.url) as api:
        make_prepaid(api, tenant, 50_000_000, "seed")  # the workers start after: prepaid
    client = closing(
        openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=15)
    )
    native_raw = client.responses.with_raw_response.create(
        model="slow-native", input="resumed by polling", background=True
    )
    chat_raw = client.responses.with_raw_response.create(
        model="slow-chat", input="lost with its worker", background=True
    )
    native, chat = native_raw.parse(), chat_raw.parse()
    time.sleep(0.5)
    assert client.responses.retrieve(native.id).status == "queued"  # no runner here

    first = WorkerProcess(tmp_path, "first", env).start()
    # The provider has both calls (and the native one is being polled: its id is saved).
    _wait(
        lambda: (
            any(r.path.startswith("/v1/responses/resp_mock") for r in upstream.requests)
            and len(upstream.chat_requests()) == 1
        ),
        "the first worker did not reach the provider",
    )
    first.kill()
    assert client.responses.retrieve(native.id).status == "in_progress"

    second = WorkerProcess(tmp_path, "second", env).start()
    try:
        deadline = time.monotonic() + 30
        while True:
            statuses = [client.responses.retrieve(r.id) for r in (native, chat)]
            if all(s.status not in ("queued", "in_progress") for s in statuses):
                break
            assert time.monotonic() < deadline, [s.status for s in statuses]
            time.sleep(0.2)
    finally:
        assert second.stop() == 0, second.logs()
    resumed, lost = statuses
    assert resumed.status == "completed" and resumed.output_text == "resumed by polling"
    assert lost.status == "failed" and lost.error is not None
    assert str(lost.error.code) == "worker_lost"  # (OpenAI's enum has no such code)
    creates = [r for r in upstream.requests if r.path == "/v1/responses"]
    assert len(creates) == 1  # the native response was created once
    assert len(upstream.chat_requests()) == 1  # and the chat call made once
    ids = [native_raw.headers["x-request-id"], chat_raw.headers["x-request-id"]]
    records = gateway.records(ids)
    assert records[ids[0]]["status_code"] == 200 and records[ids[0]]["output_tokens"] == 3
    assert (records[ids[1]]["status_code"], records[ids[1]]["error_code"]) == (500, "worker_lost")
    with sqlite3.connect(gateway.database_url.removeprefix("sqlite:///")) as conn:
        counted = conn.execute(
            "SELECT COUNT(*) FROM request_records WHERE request_id IN (?, ?)", ids
        ).fetchone()[0]
        epochs = conn.execute(
            "SELECT epoch FROM jobs WHERE id IN (?, ?)", (native.id[5:], chat.id[5:])
        ).fetchall()
    assert counted == 2
    assert sorted(e for (e,) in epochs) == [2, 2]  # each claimed by both workers, in turn
    resumed_hold = eventually(
        lambda: (r := db.reservation(ids[0])) and r["status"] != "held" and r,
        what="the resumed response's settle",
    )
    assert resumed_hold["status"] == "settled"
    assert resumed_hold["charged_micros"] == records[ids[0]]["cost_micros"] > 0
    lost_hold = db.reservation(ids[1])
    assert lost_hold is not None and lost_hold["status"] == "metering_failed"
    assert [e["kind"] for e in db.entries(tenant) if e["request_id"] == ids[0]] == [
        "reserve",
        "charge",
    ]
    db.assert_balanced(tenant)

"""Admission limits on one gateway process (the in-process limiter): rpm, tpm,
concurrency and monthly budgets, with their headers and errors in both protocols."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

KEY_RPM = "limits-key-rpm-0123456789"
KEY_CONC = "limits-key-conc-0123456789"
KEY_TPM = "limits-key-tpm-0123456789"
KEY_BUDGET = "limits-key-budget-0123456789"
KEY_FREE = "limits-key-free-0123456789"
TPM = 2000


def limits_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: sk-test
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
  - name: priced
    routes: [{{provider: up, upstream_model: echo}}]
    pricing: {{input_per_mtok: 1000000, output_per_mtok: 1000000}}
  - name: slow
    routes: [{{provider: up, upstream_model: slow-1500}}]
  - name: stall
    routes: [{{provider: up, upstream_model: stall-after-2}}]
projects:
  - name: rpm
    keys: [{{name: rpm, key: {KEY_RPM}, limits: {{rpm: 5}}}}]
  - name: conc
    keys: [{{name: conc, key: {KEY_CONC}, limits: {{concurrency: 2}}}}]
  - name: tpm
    keys: [{{name: tpm, key: {KEY_TPM}, limits: {{tpm: {TPM}}}}}]
  - name: budget
    monthly_budget_usd: 40
    keys:
      - {{name: budget, key: {KEY_BUDGET}}}
  - name: free
    keys: [{{name: free, key: {KEY_FREE}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("limits")
    process = GatewayProcess(folder, config=limits_config(upstream)).start()
    yield process
    assert process.stop() == 0, process.logs()


def chat(gateway: GatewayProcess, key: str, model: str = "chat", **body: Any) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hello there"}], **body},
        timeout=10,
    )


def test_rpm_admits_the_limit_then_answers_429_with_its_headers(gateway: GatewayProcess) -> None:
    answers = [chat(gateway, KEY_RPM) for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    assert [a.headers["x-ratelimit-remaining"] for a in answers] == ["4", "3", "2", "1", "0"]
    assert {a.headers["x-ratelimit-limit"] for a in answers} == {"5"}
    assert all(1 <= int(a.headers["x-ratelimit-reset"]) <= 60 for a in answers)

    refused = chat(gateway, KEY_RPM)
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-limit"] == "5"
    assert refused.headers["x-ratelimit-remaining"] == "0"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert 1 <= int(refused.headers["x-ratelimit-reset"]) <= 60
    error = refused.json()["error"]
    assert error["code"] == "rpm_limit_exceeded"
    assert "rpm" in error["message"] and "key" in error["message"]
    assert refused.json()["request_id"] == refused.headers["x-request-id"]

    # The official SDKs see their own rate-limit errors, in their protocol's shape.
    client = openai.OpenAI(api_key=KEY_RPM, base_url=gateway.base_url, max_retries=0)
    with client, pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    messages = anthropic.Anthropic(api_key=KEY_RPM, base_url=gateway.url, max_retries=0)
    with messages, pytest.raises(anthropic.RateLimitError) as caught:
        messages.messages.create(
            model="chat", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert "rpm" in caught.value.body["error"]["message"]  # type: ignore[index]

    # A key without limits is not affected, and carries no rate-limit headers.
    free = chat(gateway, KEY_FREE)
    assert free.status_code == 200
    assert "x-ratelimit-limit" not in free.headers


def test_concurrency_keeps_exactly_the_limit_in_flight(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    upstream.peak_in_flight = 0
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: chat(gateway, KEY_CONC, "slow"), range(6)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 200, 429, 429, 429, 429]
    assert upstream.peak_in_flight == 2
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"
    assert refused.headers["x-ratelimit-limit"] == "2"
    # Both leases came back when the answers ended.
    assert [chat(gateway, KEY_CONC).status_code for _ in range(3)] == [200, 200, 200]


def test_a_client_leaving_mid_stream_frees_its_lease_at_once(gateway: GatewayProcess) -> None:
    streaming = threading.Barrier(3)  # both streams have their first bytes, and the test
    gone = threading.Event()
    statuses: list[int] = []

    def stream_then_leave() -> None:
        with httpx.stream(
            "POST",
            f"{gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY_CONC}"},
            json={
                "model": "stall",
                "stream": True,
                "messages": [{"role": "user", "content": "a b c d e f"}],
            },
            timeout=10,
        ) as answer:
            statuses.append(answer.status_code)
            # Keep the iterator referenced: a dropped one is finalised by the garbage
            # collector at some later point, and its close cuts the connection early (the
            # gateway then rightly frees the lease, and the held request below got 200).
            chunks = answer.iter_raw()
            next(chunks)
            streaming.wait(10)
            gone.wait(10)
            del chunks

    threads = [threading.Thread(target=stream_then_leave) for _ in range(2)]
    for thread in threads:
        thread.start()
    streaming.wait(10)
    assert statuses == [200, 200]
    held = chat(gateway, KEY_CONC)  # the stalled streams hold both leases
    assert held.status_code == 429, held.text
    gone.set()  # the clients close their connections mid-stream
    for thread in threads:
        thread.join(10)
    started = time.monotonic()
    while (answer := chat(gateway, KEY_CONC)).status_code == 429:
        assert time.monotonic() - started < 20, "the lease was not freed when the client left"
        time.sleep(0.02)
    assert answer.status_code == 200


def test_tpm_reservations_are_reconciled_with_the_real_usage(gateway: GatewayProcess) -> None:
    # Each request reserves its prompt estimate + max_tokens (~ TPM * 0.4); without
    # reconciliation the third would not fit in the minute.
    body: dict[str, Any] = {"max_tokens": TPM * 2 // 5}
    first = chat(gateway, KEY_TPM, **body)
    assert first.status_code == 200
    second = chat(gateway, KEY_TPM, **body)
    assert second.status_code == 200
    reserved = TPM - int(first.headers["x-ratelimit-remaining"])
    assert reserved > TPM * 2 // 5
    real = first.json()["usage"]["total_tokens"]
    # After the first ended, its reservation became its real usage.
    assert (
        int(first.headers["x-ratelimit-remaining"]) - int(second.headers["x-ratelimit-remaining"])
        == real
    )
    answers = [chat(gateway, KEY_TPM, **body) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    used = sum(a.json()["usage"]["total_tokens"] for a in [first, second, *answers])
    # The window now holds the real usage of all five plus the last one's reservation.
    last = answers[-1]
    assert TPM - int(last.headers["x-ratelimit-remaining"]) == used - real + reserved
    # A request larger than the whole minute is refused while the window holds anything.
    refused = chat(gateway, KEY_TPM, max_tokens=TPM * 10)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "tpm_limit_exceeded"


def _spend(gateway: GatewayProcess, project_key: str) -> list[tuple[int, int | None]]:
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT r.status_code, r.cost_micros FROM request_records r "
            "JOIN api_keys k ON k.id = r.key_id WHERE k.name = ? ORDER BY r.id",
            (project_key,),
        ).fetchall()
    return [(int(status), cost) for status, cost in rows]


def test_a_spent_monthly_budget_refuses_until_rebuilt_from_records(
    gateway: GatewayProcess, upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> None:
    statuses = []
    for _ in range(40):
        answer = chat(gateway, KEY_BUDGET, "priced")
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            break
    assert statuses[-1] == 429
    error = answer.json()["error"]
    assert error["code"] == "budget_limit_exceeded"
    assert "project" in error["message"]
    assert int(answer.headers["retry-after"]) >= 1
    # Refused at the first chance: the spend before the last success was under the budget,
    # and the successes together reached it.
    time.sleep(1.0)  # the records are written in batches
    costs = [cost for status, cost in _spend(gateway, "budget") if status == 200]
    assert len(costs) == statuses.count(200)
    assert all(cost is not None and cost > 0 for cost in costs)
    budget = 40 * 1_000_000
    assert sum(costs) >= budget > sum(costs[:-1])  # type: ignore[arg-type]

    # Another process on the same database rebuilds the month's spend from the records.
    again = GatewayProcess(
        tmp_path_factory.mktemp("limits-restart"),
        config=limits_config(upstream),
        database_url=gateway.database_url,
    ).start()
    try:
        refused = chat(again, KEY_BUDGET, "priced")
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "budget_limit_exceeded"
        assert chat(again, KEY_FREE).status_code == 200
    finally:
        assert again.stop() == 0, again.logs()


def test_workers_without_redis_share_a_limit_instead_of_multiplying_it(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`serve --workers 2` without Redis: each worker enforces half of rpm 5 (2 each,
    rounded down), so together they admit at most 4 (never 2 x 5)."""
    process = GatewayProcess(tmp_path_factory.mktemp("workers"), config=limits_config(upstream))
    process.args += ["--workers", "2"]
    process.start()
    try:
        deadline = time.monotonic() + 20
        while process.logs().count("Application startup complete") < 2:
            assert time.monotonic() < deadline, process.logs()
            time.sleep(0.05)
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: chat(process, KEY_RPM), range(40)))
        admitted = [a.status_code for a in answers].count(200)
        assert 2 <= admitted <= 4
        assert [a.status_code for a in answers].count(429) == 40 - admitted
        assert process.logs().count("limits_divided_among_workers") == 2
    finally:
        assert process.stop() == 0, process.logs()

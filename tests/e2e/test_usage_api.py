"""The usage API against real traffic: a burst of requests through the gateway (the official
OpenAI SDK, streams and not, two projects, two models), then the summary, time series and
request list must match what the mock upstream reported, exactly. On SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.zygote import run_llmrelay

ADMIN = "admin-token-for-usage-tests-0123456789"
KEYS = {"alpha": "usage-alpha-key-0123456789", "beta": "usage-beta-key-0123456789"}


def usage_config(upstream: MockUpstream) -> str:
    return f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models:
  - name: small
    routes: [{{provider: up, upstream_model: echo}}]
    pricing: {{input_per_mtok: 1, output_per_mtok: 2}}
  - name: large
    routes: [{{provider: up, upstream_model: cached}}]
    pricing: {{input_per_mtok: 3, output_per_mtok: 5, cached_input_per_mtok: 1}}
projects:
  - {{name: alpha, keys: [{{name: main, key: {KEYS["alpha"]}}}]}}
  - {{name: beta, keys: [{{name: main, key: {KEYS["beta"]}}}]}}
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'usage.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
def gateway(database_url: str, upstream: MockUpstream, tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path,
        config=usage_config(upstream),
        database_url=database_url,
        env={"LLMRELAY_ADMIN_TOKEN": ADMIN},
    )
    if database_url.startswith("postgresql"):
        migrated = run_llmrelay(
            ["migrate"],
            env={**process.env},
        )
        assert migrated.returncode == 0, migrated.stderr
    process.start()
    yield process
    assert process.stop() == 0, process.logs()


def admin(
    gateway: GatewayProcess, path: str, token: str | None = ADMIN, **params: Any
) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{gateway.url}/api/admin{path}", params=params, headers=headers, timeout=10)


def burst(gateway: GatewayProcess) -> list[tuple[str, str, Any]]:
    """40 requests in parallel: (project, model, the usage the upstream reported)."""
    plan = [
        (project, model, i % 2 == 0)
        for i, (project, model) in enumerate(
            [(p, m) for p in ("alpha", "beta") for m in ("small", "large")] * 10
        )
    ]

    def one(step: tuple[str, str, bool]) -> tuple[str, str, Any]:
        project, model, stream = step
        words = " ".join(["word"] * (3 + len(project) + len(model)))
        with openai.OpenAI(
            base_url=gateway.base_url, api_key=KEYS[project], max_retries=0
        ) as client:
            messages: Any = [{"role": "user", "content": words}]
            if stream:
                chunks = list(
                    client.chat.completions.create(
                        model=model,
                        messages=messages,
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                )
                return project, model, chunks[-1].usage
            return (
                project,
                model,
                client.chat.completions.create(model=model, messages=messages).usage,
            )

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, plan))


def wait_for(gateway: GatewayProcess, requests: int, **params: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        answer = admin(gateway, "/usage/summary", **params)
        assert answer.status_code == 200, answer.text
        if answer.json()["requests"] >= requests or time.monotonic() > deadline:
            return dict(answer.json())
        time.sleep(0.2)


PRICES = {
    "small": (1, 2, 1),
    "large": (3, 5, 1),
}  # input, output, cached input: micro-USD per token


def expected_cost(model: str, usage: Any) -> int:
    fresh_price, output_price, cached_price = PRICES[model]
    details = usage.prompt_tokens_details
    cached: int = (details.cached_tokens or 0) if details else 0
    prompt: int = usage.prompt_tokens
    completion: int = usage.completion_tokens
    return (prompt - cached) * fresh_price + cached * cached_price + completion * output_price


def test_summary_and_timeseries_match_the_upstreams_counts_exactly(gateway: GatewayProcess) -> None:
    since = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    done = burst(gateway)
    assert len(done) == 40
    total = wait_for(gateway, 40, since=since)
    assert total["requests"] == 40 and total["errors"] == 0
    assert total["input_tokens"] == sum(u.prompt_tokens for _, _, u in done)
    assert total["output_tokens"] == sum(u.completion_tokens for _, _, u in done)
    assert total["cached_input_tokens"] == sum(
        (u.prompt_tokens_details.cached_tokens or 0) if u.prompt_tokens_details else 0
        for _, _, u in done
    )
    assert total["cost_micros"] == sum(expected_cost(m, u) for _, m, u in done)
    assert total["cost_usd"] == pytest.approx(total["cost_micros"] / 1_000_000)

    # the contract's form: project by name and a start time
    alpha = admin(gateway, "/usage/summary", project="alpha", since=since).json()
    assert alpha["requests"] == 20
    assert alpha["input_tokens"] == sum(u.prompt_tokens for p, _, u in done if p == "alpha")
    both = admin(gateway, "/usage/summary", project="beta", model="large", key="main").json()
    assert both["requests"] == 10
    assert both["output_tokens"] == sum(
        u.completion_tokens for p, m, u in done if (p, m) == ("beta", "large")
    )

    groupings: list[tuple[str, Callable[[str, str], str]]] = [
        ("model", lambda p, m: m),
        ("project", lambda p, m: p),
    ]
    for group_by, of in groupings:
        answer = admin(gateway, "/usage/timeseries", bucket="hour", group_by=group_by, since=since)
        assert answer.status_code == 200, answer.text
        series = answer.json()["data"]
        requests: Counter[str] = Counter()
        tokens: Counter[str] = Counter()
        for point in series:
            requests[point["group"]] += point["requests"]
            tokens[point["group"]] += point["input_tokens"] + point["output_tokens"]
            assert point["start"].endswith(":00:00Z")
            assert point["latency_ms"]["p50"] <= point["latency_ms"]["p95"]
            assert point["ttfb_ms"]["p50"] is not None and point["error_rate"] == 0
        assert requests == Counter(of(p, m) for p, m, _ in done)
        assert tokens == Counter(
            {name: sum(u.total_tokens for p, m, u in done if of(p, m) == name) for name in requests}
        )
    daily = admin(gateway, "/usage/timeseries", bucket="day", since=since).json()["data"]
    assert sum(point["requests"] for point in daily) == 40
    assert all(point["start"].endswith("T00:00:00Z") for point in daily)


def test_request_pages_cover_every_request_once_and_one_request_shows_its_attempts(
    gateway: GatewayProcess,
) -> None:
    burst(gateway)
    wait_for(gateway, 40)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 7, "project": "alpha"}
        if cursor:
            params["cursor"] = cursor
        page = admin(gateway, "/requests", **params).json()
        seen += [row["request_id"] for row in page["data"]]
        assert all(row["project_id"] for row in page["data"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 20 and len(set(seen)) == 20
    one = admin(gateway, f"/requests/{seen[0]}")
    assert one.status_code == 200
    body = one.json()
    assert body["request_id"] == seen[0] and body["usage_source"] == "reported"
    assert body["attempt_log"] == []  # answered by its first attempt
    assert body["created_at"].endswith("Z")


def test_bad_input_is_a_400_naming_the_field_and_auth_is_required(gateway: GatewayProcess) -> None:
    cases = [
        ({"since": "yesterday"}, "since"),
        ({"project": "nobody"}, "project"),
        ({"key": "nobody"}, "key"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
    ]
    for params, field in cases:
        answer = admin(gateway, "/usage/summary", **params)
        assert answer.status_code == 400, (params, answer.text)
        assert answer.json()["error"]["field"] == field
    bad_bucket = admin(gateway, "/usage/timeseries", bucket="week")
    assert bad_bucket.status_code == 400 and bad_bucket.json()["error"]["field"] == "bucket"
    bad_cursor = admin(gateway, "/requests", cursor="%%%")
    assert bad_cursor.status_code == 400 and bad_cursor.json()["error"]["field"] == "cursor"
    missing = admin(gateway, "/requests/req_nothing_here")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    for token in (None, "wrong-token"):
        refused = admin(gateway, "/usage/summary", token=token)
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "authentication_error"
    schema = httpx.get(f"{gateway.url}/api/admin/openapi.json", timeout=10)
    assert schema.status_code == 200
    assert "/usage/summary" in schema.json()["paths"]


def test_without_an_admin_token_the_admin_api_is_closed(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    process = GatewayProcess(tmp_path, config=usage_config(upstream)).start()
    try:
        answer = httpx.get(f"{process.url}/api/admin/usage/summary", timeout=10)
        assert answer.status_code == 401
        assert "LLMRELAY_ADMIN_TOKEN" in answer.json()["error"]["message"]
    finally:
        assert process.stop() == 0

"""`llmrelay_event_loop_lag_seconds` from a real `serve`: exported on /metrics with
observations, and a request whose handling holds the event loop (a body of 300,000 messages,
parsed in one go) shows up in it as waits of many milliseconds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway_process import GatewayProcess, serving

KEY = "loop-lag-key-0123456789"
CONFIG = f"""
providers:
  - {{slug: nowhere, type: openai_compatible, base_url: "http://127.0.0.1:9/v1", api_key: x}}
models:
  - {{name: chat, routes: [{{provider: nowhere, upstream_model: m}}]}}
projects:
  - name: lag
    keys: [{{name: main, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    env = {"LLMRELAY_LOOP_LAG_SAMPLE_S": "0.005"}
    yield from serving(Path(tmp_path_factory.mktemp("loop-lag")), CONFIG, env)


def _lag(gateway: GatewayProcess) -> dict[str, float]:
    """The histogram's samples: "count", "sum" and "le=BOUND" cumulative counts."""
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "llmrelay_event_loop_lag_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                out[f"le={sample.labels['le']}"] = sample.value
            else:
                out[sample.name.rsplit("_", 1)[1]] = sample.value
    return out


def _over(samples: dict[str, float], bound: str) -> float:
    """Observations longer than `bound` seconds."""
    return samples["count"] - samples[f"le={bound}"]


def test_the_histogram_is_exported_with_observations(gateway: GatewayProcess) -> None:
    deadline = time.monotonic() + 20
    while (samples := _lag(gateway)).get("count", 0) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert samples["count"] >= 10
    assert samples["le=+Inf"] == samples["count"] and samples["sum"] >= 0


def test_a_request_that_holds_the_loop_shows_up(gateway: GatewayProcess) -> None:
    body = orjson.dumps(
        {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}] * 300_000}
    )
    before = _over(_lag(gateway), "0.01")
    deadline = time.monotonic() + 60
    while _over(_lag(gateway), "0.01") <= before and time.monotonic() < deadline:
        answer = httpx.post(
            f"{gateway.base_url}/chat/completions",
            content=body,
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
            timeout=60,
        )
        assert answer.status_code in (400, 404), answer.text  # parsed whole, then refused
    assert _over(_lag(gateway), "0.01") > before

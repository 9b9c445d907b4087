"""What each request is recorded as using and costing, however it ends: usage in billing
buckets (reported, or estimated and flagged), cost per bucket in integer micro-USD with the
price version and its source, the client's protocol, address and user agent."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "metering-key-0123456789"
SECRET = "sk-upstream-metering"


def metering_config(upstream: MockUpstream) -> str:
    root = upstream.root_url
    priced = (
        "{input_per_mtok: 1, output_per_mtok: 2, cached_input_per_mtok: 0.5,"
        " cache_write_per_mtok: 1.25}"
    )
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {SECRET},
      first_token_timeout_s: 2, stream_idle_timeout_s: 2}}
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
models:
  - {{name: priced, routes: [{{provider: up, upstream_model: echo}}], pricing: {priced}}}
  - {{name: cached, routes: [{{provider: up, upstream_model: cached}}], pricing: {priced}}}
  - name: route-priced
    routes:
      - {{provider: up, upstream_model: echo, pricing: {{input_per_mtok: 3, output_per_mtok: 4}}}}
    pricing: {priced}
  - {{name: catalogued, routes: [{{provider: up, upstream_model: gpt-4o-mini}}]}}
  - {{name: unpriced, routes: [{{provider: up, upstream_model: echo}}]}}
  - {{name: silent, routes: [{{provider: up, upstream_model: no-usage}}], pricing: {priced}}}
  - {{name: stall, routes: [{{provider: up, upstream_model: stall-after-3}}], pricing: {priced}}}
  - {{name: broken, routes: [{{provider: up, upstream_model: status-500}}], pricing: {priced}}}
  - {{name: cut, routes: [{{provider: up, upstream_model: drop-after-2}}], pricing: {priced}}}
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-haiku-4-5}}]
    pricing: {priced}
projects:
  - name: metering
    keys: [{{name: main, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("metering"), metering_config(upstream))


def chat(gateway: GatewayProcess, request_id: str, model: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={
            "Authorization": f"Bearer {KEY}",
            "X-Request-ID": request_id,
            "User-Agent": "metering-test/1.0",
        },
        json={
            "model": model,
            "messages": [{"role": "user", "content": "one two three four"}],
            **body,
        },
        timeout=10,
    )


def buckets(row: dict[str, Any]) -> tuple[int, ...]:
    return tuple(
        row[name]
        for name in (
            "input_tokens",
            "cached_input_tokens",
            "cache_write_tokens",
            "output_tokens",
            "reasoning_tokens",
        )
    )


def costs(row: dict[str, Any]) -> tuple[int, ...]:
    return tuple(
        row[f"{name}_cost_micros"] for name in ("input", "cached_input", "cache_write", "output")
    )


def test_reported_usage_is_recorded_by_bucket_and_priced_per_bucket(
    gateway: GatewayProcess,
) -> None:
    assert chat(gateway, "m-plain", "priced").status_code == 200
    assert chat(gateway, "m-cached", "cached").status_code == 200
    assert chat(gateway, "m-stream", "cached", stream=True).status_code == 200
    rows = gateway.records(["m-plain", "m-cached", "m-stream"])
    plain, cached, stream = rows["m-plain"], rows["m-cached"], rows["m-stream"]
    # the mock reports 4 prompt tokens (one per word) and 4 completion tokens (the echo)
    assert buckets(plain) == (4, 0, 0, 4, 0)
    assert costs(plain) == (4, 0, 0, 8) and plain["cost_micros"] == 12
    # "cached": half the prompt cached (a subset of prompt_tokens), one reasoning token
    assert buckets(cached) == (2, 2, 0, 4, 1)
    assert costs(cached) == (2, 1, 0, 8) and cached["cost_micros"] == 11
    assert (cached["prompt_tokens"], cached["completion_tokens"]) == (4, 4)
    # a stream whose client did not ask for usage is metered the same (the gateway asked)
    assert buckets(stream) == buckets(cached) and stream["cost_micros"] == 11
    for row in (plain, cached, stream):
        assert row["usage_source"] == "reported"
        assert row["price_source"] == "model" and row["price_version"]
        assert row["protocol"] == "openai"
        assert row["client_ip"] == "127.0.0.1"
        assert row["user_agent"] == "metering-test/1.0"


def test_a_routes_own_price_comes_before_the_models_and_the_catalogue_after_both(
    gateway: GatewayProcess,
) -> None:
    for request_id, model in (
        ("m-route", "route-priced"),
        ("m-cat", "catalogued"),
        ("m-none", "unpriced"),
    ):
        assert chat(gateway, request_id, model).status_code == 200
    rows = gateway.records(["m-route", "m-cat", "m-none"])
    route = rows["m-route"]
    assert (route["price_source"], route["cost_micros"]) == ("route", 4 * 3 + 4 * 4)
    assert route["price_version"].startswith("route:")
    catalogued = rows["m-cat"]
    assert catalogued["price_source"] == "catalogue"
    # The catalogue's price, made explicit by the price sync job at start (a price_versions
    # row of source "catalogue"), or read from the catalogue itself before it ran.
    assert catalogued["price_version"]
    # 4 * 0.15 + 4 * 0.60 micro-USD, each bucket rounded half up: 1 + 2
    assert costs(catalogued) == (1, 0, 0, 2)
    unknown = rows["m-none"]
    assert (unknown["price_source"], unknown["cost_micros"], unknown["price_version"]) == (
        "unknown",
        0,
        None,
    )
    assert buckets(unknown) == (4, 0, 0, 4, 0)  # the usage is still recorded


def test_without_reported_usage_the_gateway_counts_and_flags_the_estimate(
    gateway: GatewayProcess,
) -> None:
    long_prompt = "hello " * 40
    body = {"messages": [{"role": "user", "content": long_prompt.strip()}]}
    answer = chat(gateway, "m-silent", "silent", **body)
    assert answer.status_code == 200 and "usage" not in answer.json()
    streamed = chat(gateway, "m-silent-stream", "silent", stream=True, **body)
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
    rows = gateway.records(["m-silent", "m-silent-stream"])
    for row in rows.values():
        assert row["usage_source"] == "estimated"
        assert 40 <= row["input_tokens"] <= 60  # 40 words and the message's framing
        assert row["output_tokens"] >= 30  # the echo, counted from the answer or its events
        assert row["cost_micros"] > 0 and row["price_source"] == "model"


def test_an_upstream_error_before_any_output_costs_nothing(gateway: GatewayProcess) -> None:
    assert chat(gateway, "m-broken", "broken").status_code == 502
    row = gateway.records(["m-broken"])["m-broken"]
    assert row["usage_source"] == "none"
    assert row["input_tokens"] is None and row["cost_micros"] == 0


def test_a_client_leaving_mid_stream_is_charged_an_estimate_of_what_it_got(
    gateway: GatewayProcess,
) -> None:
    got_bytes = threading.Event()
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "m-left"},
        json={
            "model": "stall",
            "stream": True,
            "messages": [{"role": "user", "content": "a b c d e f"}],
        },
        timeout=10,
    ) as answer:
        assert answer.status_code == 200
        received = b""
        for piece in answer.iter_raw():
            received += piece
            if received.count(b"data: ") >= 4:  # the role and three words
                got_bytes.set()
                break
    assert got_bytes.is_set()
    row = gateway.records(["m-left"])["m-left"]
    assert row["status_code"] == 499 and row["usage_source"] == "estimated"
    assert row["output_tokens"] == 3  # three content events reached the client
    assert row["input_tokens"] > 0 and row["cost_micros"] > 0


def test_anthropic_clients_are_recorded_with_anthropics_buckets(gateway: GatewayProcess) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY) as client:
        message = client.messages.create(
            model="claude",
            max_tokens=50,
            system="You are terse.",
            messages=[{"role": "user", "content": "one two three"}],
            extra_headers={"X-Request-ID": "m-claude"},
        )
    row = gateway.records(["m-claude"])["m-claude"]
    usage = message.usage
    assert row["protocol"] == "anthropic" and row["usage_source"] == "reported"
    assert buckets(row)[:4] == (
        usage.input_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
        usage.output_tokens,
    )
    assert usage.cache_read_input_tokens  # the mock caches the system prompt
    expected = (
        usage.input_tokens * 1 + (usage.cache_read_input_tokens or 0) // 2 + usage.output_tokens * 2
    )
    assert abs(row["cost_micros"] - expected) <= 1


def test_openai_sdk_streams_are_metered_with_and_without_asking(gateway: GatewayProcess) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY) as client:
        chunks = list(
            client.chat.completions.create(
                model="priced",
                messages=[{"role": "user", "content": "one two three four"}],
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"X-Request-ID": "m-sdk"},
            )
        )
    assert chunks[-1].usage is not None
    row = gateway.records(["m-sdk"])["m-sdk"]
    assert (row["input_tokens"], row["output_tokens"]) == (
        chunks[-1].usage.prompt_tokens,
        chunks[-1].usage.completion_tokens,
    )
    assert row["user_agent"].startswith("OpenAI/Python")


def _samples(gateway: GatewayProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_count_requests_by_protocol_tokens_by_bucket_cost_and_attempts(
    gateway: GatewayProcess,
) -> None:
    ids = [f"m-metrics-{i}" for i in range(3)]
    for request_id in ids:
        assert chat(gateway, request_id, "cached").status_code == 200
    assert chat(gateway, "m-metrics-broken", "broken").status_code == 502
    gateway.records([*ids, "m-metrics-broken"])
    samples = _samples(gateway)
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        sums = conn.execute(
            "SELECT sum(input_tokens), sum(cached_input_tokens), sum(output_tokens),"
            " sum(reasoning_tokens), sum(cost_micros), count(*) FROM request_records"
            " WHERE virtual_model = 'cached'"
        ).fetchone()

    def tokens(bucket: str) -> float:
        labels = (("bucket", bucket), ("model", "cached"), ("provider", "up"))
        return samples.get(("llmrelay_tokens_total", labels), 0)

    assert (tokens("input"), tokens("cached_input"), tokens("output"), tokens("reasoning")) == (
        sums[0],
        sums[1],
        sums[2],
        sums[3],
    )
    cost = samples[("llmrelay_cost_usd_total", (("model", "cached"), ("provider", "up")))]
    assert cost == pytest.approx(sums[4] / 1_000_000)
    ok = (
        "llmrelay_requests_total",
        (
            ("endpoint", "chat.completions"),
            ("model", "cached"),
            ("protocol", "openai"),
            ("provider", "up"),
            ("status", "200"),
        ),
    )
    assert samples[ok] == sums[5]
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY) as client:
        client.messages.create(
            model="claude", max_tokens=20, messages=[{"role": "user", "content": "hi"}]
        )
    time.sleep(0.1)
    claude = [
        key
        for key in _samples(gateway)
        if key[0] == "llmrelay_requests_total" and ("protocol", "anthropic") in key[1]
    ]
    assert claude
    failed = (
        "llmrelay_upstream_attempts_total",
        (("kind", "first"), ("outcome", "upstream_error"), ("provider", "up")),
    )
    assert samples.get(failed, 0) >= 1, [
        k for k in samples if k[0] == "llmrelay_upstream_attempts_total"
    ]
    assert 0 <= samples[("llmrelay_snapshot_age_seconds", ())] < 600
    ttfb = [v for k, v in samples.items() if k[0] == "llmrelay_request_ttfb_seconds_count"]
    assert ttfb and sum(ttfb) >= 3


def test_an_upstream_cut_mid_stream_is_charged_an_estimate_of_what_was_delivered(
    gateway: GatewayProcess,
) -> None:
    answer = chat(gateway, "m-cut", "cut", stream=True)
    assert answer.status_code == 200 and '"stream_interrupted"' in answer.text
    row = gateway.records(["m-cut"])["m-cut"]
    assert row["status_code"] == 502 and row["usage_source"] == "estimated"
    assert row["output_tokens"] == 2  # two content events reached the client before the cut
    assert row["input_tokens"] > 0 and row["cost_micros"] > 0


#: A system prompt long enough that its cache write and reads cost whole micro-dollars.
LONG_SYSTEM = " ".join(f"rule{i}" for i in range(399))


def _messages(gateway: GatewayProcess, request_id: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "X-Request-ID": request_id}
    return httpx.post(f"{gateway.url}/v1/messages", headers=headers, json=body, timeout=10)


def test_cache_marks_reach_anthropic_and_cache_writes_and_reads_are_billed_apart(
    gateway: GatewayProcess,
) -> None:
    system = [
        {"type": "text", "text": f"{LONG_SYSTEM} pass", "cache_control": {"type": "ephemeral"}}
    ]
    turn = {"model": "claude", "max_tokens": 50, "system": system}
    first = _messages(gateway, "m-cw-1", {**turn, "messages": [{"role": "user", "content": "a"}]})
    assert first.status_code == 200, first.text
    assert first.json()["usage"]["cache_creation_input_tokens"] == 400  # the mock saw the mark
    second = _messages(
        gateway,
        "m-cw-2",
        {**turn, "stream": True, "messages": [{"role": "user", "content": "b c"}]},
    )
    assert second.status_code == 200 and b"message_stop" in second.content
    rows = gateway.records(["m-cw-1", "m-cw-2"])
    written, read = rows["m-cw-1"], rows["m-cw-2"]
    assert buckets(written)[:3] == (1, 0, 400) and buckets(read)[:3] == (2, 400, 0)
    assert costs(written)[:3] == (1, 0, 500)  # 1 input, 400 written at $1.25 / Mtok
    assert costs(read)[:3] == (2, 200, 0)  # 400 read at $0.50 / Mtok
    for row in (written, read):
        assert row["cost_micros"] == sum(costs(row))


def test_a_chat_clients_cache_marks_are_kept_to_anthropic_and_billed(
    gateway: GatewayProcess,
) -> None:
    marked = {"type": "text", "text": f"{LONG_SYSTEM} chat", "cache_control": {"type": "ephemeral"}}
    for request_id, question in (("m-cw-chat-1", "x"), ("m-cw-chat-2", "y z")):
        response = chat(
            gateway,
            request_id,
            "claude",
            messages=[
                {"role": "system", "content": [marked]},
                {"role": "user", "content": question},
            ],
        )
        assert response.status_code == 200, response.text
    rows = gateway.records(["m-cw-chat-1", "m-cw-chat-2"])
    assert buckets(rows["m-cw-chat-1"])[:3] == (1, 0, 400)
    assert buckets(rows["m-cw-chat-2"])[:3] == (2, 400, 0)
    assert costs(rows["m-cw-chat-1"])[2] == 500 and costs(rows["m-cw-chat-2"])[1] == 200

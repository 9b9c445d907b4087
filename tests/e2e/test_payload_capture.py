"""Payload capture through a real gateway process: a key with `capture: full` (from its
project) and one that opts out, called with raw HTTP, the official OpenAI SDK (JSON and
streams) and the official Anthropic SDK, errors included; the admin API then shows exactly
the bytes each client sent and received, cut at the cap with the flag and the full size, and
nothing for the other key. No header, so no key, ever reaches the payloads table. On SQLite
and PostgreSQL; retention of payloads on its own and with the records'."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import text

from llmrelay.store.db import create_engine
from tests.support.gateway_process import GatewayProcess
from tests.support.kept import KeptPerParam, kept_per_param
from tests.support.mock_upstream import MockUpstream
from tests.support.zygote import run_llmrelay

ADMIN = "admin-token-for-capture-tests-0123456789"
CAPTURED = "capture-full-key-0123456789"
QUIET = "capture-quiet-key-0123456789"
SECRET = "sk-upstream-capture-secret"
CAP = 4096


def capture_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: claude, type: anthropic, base_url: "{upstream.root_url}", api_key: {SECRET}}}
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
  - name: failing
    routes: [{{provider: up, upstream_model: status-500}}]
  - name: drop
    routes: [{{provider: up, upstream_model: drop-after-2}}]
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
projects:
  - name: watched
    capture: full
    keys:
      - {{name: captured, key: {CAPTURED}}}
      - {{name: quiet, key: {QUIET}, capture: off}}
"""


def _migrate(process: GatewayProcess) -> None:
    migrated = run_llmrelay(
        ["migrate"],
        env={**process.env},
    )
    assert migrated.returncode == 0, migrated.stderr


@contextmanager
def _gateway(
    backend: str, upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("capture")
    database_url = None
    if backend == "postgres":
        from tests.conftest import need_postgres
        from tests.support.databases import create_postgres_database, drop_postgres_database

        need_postgres()
        database_url = asyncio.run(create_postgres_database())
    process = GatewayProcess(
        folder,
        config=capture_config(upstream),
        database_url=database_url,
        env={"LLMRELAY_ADMIN_TOKEN": ADMIN, "LLMRELAY_CAPTURE_MAX_BYTES": str(CAP)},
    )
    try:
        if database_url is not None:
            _migrate(process)
        process.start()
        yield process
        assert process.stop() == 0, process.logs()
    finally:
        process.stop()
        if database_url is not None:
            asyncio.run(drop_postgres_database(database_url))


@pytest.fixture(scope="module")
def gateways(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KeptPerParam[GatewayProcess]]:
    yield from kept_per_param(lambda backend: _gateway(backend, upstream, tmp_path_factory))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def gateway(
    request: pytest.FixtureRequest, gateways: KeptPerParam[GatewayProcess]
) -> GatewayProcess:
    """The module's gateway on the test's backend (kept for the module: tests/support/kept.py)."""
    return gateways.get(request.param)


def detail(gateway: GatewayProcess, request_id: str) -> dict[str, Any]:
    """The admin API's detail of one request, once the recorder has written it."""
    deadline = time.monotonic() + 30  # records land in batches; generous for a loaded machine
    while True:
        answer = httpx.get(
            f"{gateway.url}/api/admin/requests/{request_id}",
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=10,
        )
        if answer.status_code == 200 or time.monotonic() > deadline:
            assert answer.status_code == 200, answer.text
            found: dict[str, Any] = answer.json()
            return found
        time.sleep(0.1)


def payload(gateway: GatewayProcess, request_id: str) -> dict[str, Any]:
    found = detail(gateway, request_id)["payload"]
    assert found is not None
    assert (found["request_encoding"], found["response_encoding"]) == ("utf-8", "utf-8")
    return dict(found)


def post(gateway: GatewayProcess, path: str, body: bytes, key: str = CAPTURED) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}{path}",
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=10,
    )


#: Odd spacing, an escape and a raw non-ASCII character: a re-serialised body would differ.
CHAT_BODY = (
    b'{ "model" : "chat",\n  "messages": [{"role": "user", "content": "caf\\u00e9 na\xc3\xafve'
    b' hello"}] }'
)


def test_a_json_chat_is_kept_byte_for_byte_and_the_quiet_key_has_none(
    gateway: GatewayProcess,
) -> None:
    answer = post(gateway, "/chat/completions", CHAT_BODY)
    assert answer.status_code == 200, answer.text
    kept = payload(gateway, answer.headers["x-request-id"])
    assert kept["request"].encode() == CHAT_BODY
    assert kept["response"].encode() == answer.content
    assert (kept["request_bytes"], kept["response_bytes"]) == (len(CHAT_BODY), len(answer.content))
    assert (kept["request_truncated"], kept["response_truncated"]) == (False, False)

    quiet = post(gateway, "/chat/completions", CHAT_BODY, key=QUIET)
    assert quiet.status_code == 200
    record = detail(gateway, quiet.headers["x-request-id"])
    assert record["payload"] is None and record["status_code"] == 200

    listed = httpx.get(
        f"{gateway.url}/api/admin/requests",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    ).json()["data"]
    assert listed and all("payload" not in row for row in listed)
    assert "hello" not in json.dumps(listed)  # no body in the list, captured or not


def test_streams_from_the_openai_sdk_are_kept_as_delivered(gateway: GatewayProcess) -> None:
    messages: Any = [{"role": "user", "content": "one two three four five"}]
    with openai.OpenAI(api_key=CAPTURED, base_url=gateway.base_url, max_retries=0) as client:
        with client.chat.completions.with_streaming_response.create(
            model="chat", messages=messages, stream=True, stream_options={"include_usage": True}
        ) as streamed:
            delivered = b"".join(streamed.iter_bytes())
            raw_id = streamed.headers["x-request-id"]
        stream = client.chat.completions.create(model="chat", messages=messages, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        parsed_id = stream.response.headers["x-request-id"]

    kept = payload(gateway, raw_id)
    assert kept["response"].encode() == delivered
    assert kept["response"].endswith("data: [DONE]\n\n") and '"usage":{' in kept["response"]
    assert kept["response_bytes"] == len(delivered)
    sent = json.loads(kept["request"])
    assert sent["messages"] == messages and sent["stream"] is True

    other = payload(gateway, parsed_id)
    events = [
        json.loads(line[6:]) for line in other["response"].split("\n") if line.startswith("data: {")
    ]
    assert text == "one two three four five"
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == text


def test_anthropic_messages_are_kept_json_and_streamed(gateway: GatewayProcess) -> None:
    with anthropic.Anthropic(
        api_key=CAPTURED, base_url=gateway.url, max_retries=0, timeout=15
    ) as client:
        raw = client.messages.with_raw_response.create(
            model="claude", max_tokens=50, messages=[{"role": "user", "content": "hi claude"}]
        )
        message = raw.parse()
        with client.messages.with_streaming_response.create(
            model="claude",
            max_tokens=50,
            stream=True,
            messages=[{"role": "user", "content": "stream to me"}],
        ) as streamed:
            delivered = b"".join(streamed.iter_bytes())
            stream_id = streamed.headers["x-request-id"]

    kept = payload(gateway, raw.headers["x-request-id"])
    assert kept["response"].encode() == raw.http_response.content
    assert json.loads(kept["response"])["content"][0]["text"] == message.content[0].text  # type: ignore[union-attr]
    assert json.loads(kept["request"])["messages"] == [{"role": "user", "content": "hi claude"}]

    kept_stream = payload(gateway, stream_id)
    assert kept_stream["response"].encode() == delivered
    assert "event: message_stop" in kept_stream["response"]


def test_error_answers_are_kept_as_the_client_got_them(gateway: GatewayProcess) -> None:
    failing = post(gateway, "/chat/completions", CHAT_BODY.replace(b'"chat"', b'"failing"'))
    unknown = post(gateway, "/chat/completions", CHAT_BODY.replace(b'"chat"', b'"nothing"'))
    not_json = post(gateway, "/messages", b"{not json")
    for answer in (failing, unknown, not_json):
        assert answer.status_code >= 400
        kept = payload(gateway, answer.headers["x-request-id"])
        assert kept["response"].encode() == answer.content
        assert kept["response_bytes"] == len(answer.content)
    assert payload(gateway, not_json.headers["x-request-id"])["request"] == "{not json"
    assert detail(gateway, unknown.headers["x-request-id"])["status_code"] == 404

    broken = CHAT_BODY.replace(b'"chat"', b'"drop"').replace(b"] }", b'], "stream": true }')
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        content=broken,
        headers={"Authorization": f"Bearer {CAPTURED}"},
        timeout=10,
    ) as streamed:
        delivered = b"".join(streamed.iter_raw())
        request_id = streamed.headers["x-request-id"]
    kept = payload(gateway, request_id)
    assert kept["response"].encode() == delivered
    assert '"code":"stream_interrupted"' in kept["response"]  # the gateway's own error event
    assert kept["request"].encode() == broken


def test_a_body_over_the_cap_is_cut_at_exactly_the_cap(gateway: GatewayProcess) -> None:
    words = " ".join(f"w{i:05d}" for i in range(1500))  # about 10 kB, echoed back
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": words}]})
    answer = post(gateway, "/chat/completions", body.encode())
    assert answer.status_code == 200
    kept = payload(gateway, answer.headers["x-request-id"])
    assert kept["request"].encode() == body.encode()[:CAP]
    assert (kept["request_truncated"], kept["request_bytes"]) == (True, len(body))
    assert kept["response"].encode() == answer.content[:CAP]
    assert (kept["response_truncated"], kept["response_bytes"]) == (True, len(answer.content))


async def _payload_table(url: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return [
                tuple(row) for row in await conn.execute(text("SELECT * FROM request_payloads"))
            ]
    finally:
        await engine.dispose()


def test_no_key_or_credential_is_anywhere_in_the_payloads_table(gateway: GatewayProcess) -> None:
    with openai.OpenAI(api_key=CAPTURED, base_url=gateway.base_url, max_retries=0) as client:
        done = client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "is my key in here"}]
        )
    # The key in the other header this time: neither spelling may reach the table.
    by_header = httpx.post(
        f"{gateway.base_url}/chat/completions",
        content=CHAT_BODY,
        headers={"x-api-key": CAPTURED, "Content-Type": "application/json"},
        timeout=10,
    )
    assert by_header.status_code == 200, by_header.text
    for answer in (done, by_header):
        payload(gateway, answer.headers["x-request-id"])  # written by now
    rows = asyncio.run(_payload_table(gateway.database_url))
    assert len(rows) >= 2  # this test's own two, whatever ran before it
    everything = b"\n".join(
        bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
        for row in rows
        for value in row
    )
    assert b"is my key in here" in everything  # the grep sees the bodies
    for secret in (CAPTURED, QUIET, SECRET, "Bearer", "authorization", "x-api-key"):
        assert secret.encode() not in everything, secret
        assert secret.encode().lower() not in everything.lower(), secret


# -- retention ---------------------------------------------------------------------------------


def _seed(path: str, ages_days: dict[str, int]) -> None:
    """Records and their payloads, created `age` days ago."""
    with sqlite3.connect(path) as conn:
        for request_id, age in ages_days.items():
            created = time.strftime(
                "%Y-%m-%d %H:%M:%S.000000", time.gmtime(time.time() - age * 86_400)
            )
            conn.execute(
                "INSERT INTO request_records (request_id, created_at, endpoint, stream,"
                " status_code, latency_ms, attempts, usage_source)"
                " VALUES (?, ?, 'chat.completions', 0, 200, 1.0, 1, 'none')",
                (request_id, created),
            )
            conn.execute(
                "INSERT INTO request_payloads (request_id, created_at, request_body,"
                " response_body, request_truncated, response_truncated, request_bytes,"
                " response_bytes) VALUES (?, ?, x'7b7d', x'7b7d', 0, 0, 2, 2)",
                (request_id, created),
            )


@pytest.mark.parametrize(
    ("env", "payloads_kept", "records_kept"),
    [
        # payloads kept a week, records a month
        (
            {"LLMRELAY_PAYLOAD_RETENTION_DAYS": "7", "LLMRELAY_RECORD_RETENTION_DAYS": "30"},
            {"recent"},
            {"recent", "week-old", "month-old"},
        ),
        # no payload retention of their own: they go with their records
        (
            {"LLMRELAY_RECORD_RETENTION_DAYS": "30"},
            {"recent", "week-old", "month-old"},
            {"recent", "week-old", "month-old"},
        ),
    ],
)
def test_payloads_are_pruned_by_their_retention_and_never_outlive_their_records(
    tmp_path: Path,
    upstream: MockUpstream,
    env: dict[str, str],
    payloads_kept: set[str],
    records_kept: set[str],
) -> None:
    gateway = GatewayProcess(
        tmp_path,
        config=capture_config(upstream),
        env={**env, "LLMRELAY_RETENTION_INTERVAL_S": "0.2"},
    )
    _migrate(gateway)
    path = gateway.database_url.removeprefix("sqlite:///")
    ages = {"recent": 1, "week-old": 10, "month-old": 29, "ancient": 31, "older": 400}
    _seed(path, ages)
    gateway.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            with sqlite3.connect(path) as conn:
                payloads = {r[0] for r in conn.execute("SELECT request_id FROM request_payloads")}
                records = {r[0] for r in conn.execute("SELECT request_id FROM request_records")}
            if (payloads, records) == (payloads_kept, records_kept):
                break
            assert time.monotonic() < deadline, (payloads, records)
            time.sleep(0.1)
    finally:
        assert gateway.stop() == 0

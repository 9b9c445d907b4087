"""Background responses (`background: true`) through a real gateway process, with the
official openai SDK: queued at once, run as a durable job (through a provider that serves the
Responses API itself, which runs it in the background too, and through one that speaks only
chat), polled, cancelled; refused at submission as a served request is; kept sealed at rest;
limits at run time delay a job instead of failing it; one record per response, under the
submission's request id."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-background-key-0123456789"
LIMITED_KEY = "e2e-background-limited-0123456789"
OTHER_KEY = "e2e-background-other-0123456789"
CAPTURED_KEY = "e2e-background-captured-0123456789"
SECRET = "sk-provider-secret-background"


def background_config(upstream: MockUpstream) -> str:
    provider = f'base_url: "{upstream.base_url}", api_key: {SECRET}'
    return f"""
providers:
  - {{slug: oai, type: openai, {provider}}}
  - {{slug: compat, type: openai_compatible, {provider}}}
models:
  - name: bg
    routes: [{{provider: oai, upstream_model: gpt-bg}}]
  - name: bg-slow
    routes: [{{provider: oai, upstream_model: slow-4000}}]
  - name: bg-chat
    routes: [{{provider: compat, upstream_model: echo}}]
  - name: bg-failing
    routes: [{{provider: oai, upstream_model: status-500}}]
  - name: bg-forbidden
    routes: [{{provider: oai, upstream_model: gpt-bg}}]
projects:
  - name: background
    models: [bg, bg-slow, bg-chat, bg-failing]
    keys:
      - {{name: k, key: {KEY}}}
      - {{name: limited, key: {LIMITED_KEY}, limits: {{rpm: 1}}}}
      - {{name: captured, key: {CAPTURED_KEY}, capture: full}}
  - name: elsewhere
    keys: [{{name: k, key: {OTHER_KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {"LLMRELAY_JOBS_LEASE_S": "3"}  # heartbeats each second: a cancel is seen sooner
    yield from serving(tmp_path_factory.mktemp("background"), background_config(upstream), env)


def _client(gateway: GatewayProcess, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=gateway.base_url, max_retries=0, timeout=15)


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with _client(gateway) as c:
        yield c


def done(client: openai.OpenAI, response_id: str, timeout_s: float = 20) -> Response:
    """Poll as OpenAI's guide does, until the response leaves queued / in_progress."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = client.responses.retrieve(response_id)
        if found.status not in ("queued", "in_progress"):
            return found
        assert time.monotonic() < deadline, f"{response_id} still {found.status}"
        time.sleep(0.1)


def creates(upstream: MockUpstream, text: str) -> list[dict[str, object]]:
    """The create calls that reached the provider for this input."""
    return [
        r.body
        for r in upstream.requests
        if r.path == "/v1/responses" and r.body.get("input") == text
    ]


def test_through_a_provider_that_runs_it_in_the_background_too(
    client: openai.OpenAI, gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    text = "otters write novels in space"
    raw = client.responses.with_raw_response.create(
        model="bg", input=text, background=True, instructions="be brief", metadata={"n": "1"}
    )
    queued = raw.parse()
    assert re.fullmatch(r"resp_[0-9a-f]{32}", queued.id)
    assert (queued.status, queued.background, queued.model, queued.output) == (
        "queued",
        True,
        "bg",
        [],
    )
    assert queued.instructions == "be brief" and queued.metadata == {"n": "1"}
    finished = done(client, queued.id)
    assert finished.status == "completed" and finished.id == queued.id
    assert finished.output_text == text and finished.model == "bg" and finished.background
    assert finished.usage is not None and finished.usage.output_tokens == 5
    sent = creates(upstream, text)
    assert len(sent) == 1 and sent[0]["background"] is True and sent[0]["store"] is True
    polls = [r for r in upstream.requests if r.path.startswith("/v1/responses/resp_mock")]
    assert polls and all(
        {k.lower(): v for k, v in r.headers.items()}["authorization"] == f"Bearer {SECRET}"
        for r in polls
    )
    request_id = raw.headers["x-request-id"]
    record = gateway.records([request_id])[request_id]
    assert (record["endpoint"], record["virtual_model"], record["provider"]) == (
        "responses",
        "bg",
        "oai",
    )
    assert (record["status_code"], record["output_tokens"], record["usage_source"]) == (
        200,
        5,
        "reported",
    )


def test_through_a_provider_that_speaks_only_chat(
    client: openai.OpenAI, gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    text = "bridged through chat in the background"
    before = len(upstream.chat_requests())
    raw = client.responses.with_raw_response.create(model="bg-chat", input=text, background=True)
    finished = done(client, raw.parse().id)
    assert finished.status == "completed" and finished.output_text == text
    assert finished.model == "bg-chat" and finished.background is True
    chats = upstream.chat_requests()[before:]
    assert len(chats) == 1 and "background" not in chats[0].body
    request_id = raw.headers["x-request-id"]
    assert gateway.records([request_id])[request_id]["provider"] == "compat"


def test_cancel_a_running_response_and_a_finished_one(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    text = "a long story, cancelled"
    created = client.responses.create(model="bg-slow", input=text, background=True)
    deadline = time.monotonic() + 10
    while not creates(upstream, text):  # the job called the provider: it is running
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cancelled = client.responses.cancel(created.id)
    assert (cancelled.id, cancelled.status) == (created.id, "cancelled")
    assert client.responses.cancel(created.id).status == "cancelled"  # idempotent
    assert done(client, created.id).status == "cancelled"
    deadline = time.monotonic() + 10
    while not any(r.path.endswith("/cancel") for r in upstream.requests):
        assert time.monotonic() < deadline, "the provider was not asked to cancel"
        time.sleep(0.05)
    assert len(creates(upstream, text)) == 1
    finished = done(client, client.responses.create(model="bg", input="x", background=True).id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.cancel(finished.id)
    assert "Cannot cancel a completed response" in refused.value.message


def test_streamed_and_picked_up_again_after_the_last_event_seen(client: openai.OpenAI) -> None:
    text = "streamed from the background"
    with client.responses.create(model="bg", input=text, background=True, stream=True) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == text
    first, last = events[0], events[-1]
    assert first.type == "response.created" and first.response.status == "queued"
    assert last.type == "response.completed" and last.response.output_text == text
    assert last.response.id == first.response.id and last.response.background
    with client.responses.retrieve(first.response.id, stream=True, starting_after=2) as again:
        resumed = list(again)
    assert [e.sequence_number for e in resumed] == list(range(3, len(events)))
    assert [e.type for e in resumed] == kinds[3:]
    # A client that leaves the stream leaves the response running.
    left = client.responses.create(model="bg", input="left early", background=True, stream=True)
    created = next(iter(left))
    left.close()
    assert created.type == "response.created"
    assert done(client, created.response.id).output_text == "left early"


def test_limits_at_run_time_delay_the_job_and_a_queued_one_cancels_at_once(
    gateway: GatewayProcess,
) -> None:
    with _client(gateway, LIMITED_KEY) as limited:
        first = limited.responses.create(model="bg", input="first", background=True)
        second = limited.responses.create(model="bg", input="second", background=True)
        assert done(limited, first.id).status == "completed"
        time.sleep(1.0)  # the second's run found the rpm limit spent: it waits, not fails
        waiting = limited.responses.retrieve(second.id)
        assert waiting.status == "queued" and waiting.error is None
        cancelled = limited.responses.cancel(second.id)
        assert cancelled.status == "cancelled"
        assert limited.responses.retrieve(second.id).status == "cancelled"


def test_a_failed_call_is_a_failed_response(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    raw = client.responses.with_raw_response.create(model="bg-failing", input="x", background=True)
    failed = done(client, raw.parse().id)
    assert failed.status == "failed" and failed.error is not None
    assert str(failed.error.code) == "upstream_error" and "500" in failed.error.message
    request_id = raw.headers["x-request-id"]
    assert gateway.records([request_id])[request_id]["status_code"] == 502


def test_refused_at_submission_as_a_served_request_is(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="no-such-model", input="x", background=True)
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.PermissionDeniedError):
        client.responses.create(model="bg-forbidden", input="x", background=True)
    with (
        _client(gateway, "not-a-key-0123456789") as stranger,
        pytest.raises(openai.AuthenticationError),
    ):
        stranger.responses.create(model="bg", input="x", background=True)
    answer = httpx.post(
        f"{gateway.base_url}/responses",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "bg", "input": "x", "background": "yes"},
    )
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "background"


def test_only_the_project_that_asked_reads_it(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    created = client.responses.create(model="bg", input="mine", background=True)
    with _client(gateway, OTHER_KEY) as other:
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.cancel(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_" + "0" * 32)
    assert done(client, created.id).output_text == "mine"


def test_the_request_and_the_answer_are_sealed_at_rest(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    text = "zebra-marmalade-quasar"
    finished = done(client, client.responses.create(model="bg", input=text, background=True).id)
    assert finished.output_text == text
    stored = b""
    # The database, its WAL, and the spool folder beside it (the journal of ended requests
    # is there while the gateway runs: records, never bodies).
    for path in Path(gateway.database_url.removeprefix("sqlite:///")).parent.glob("gateway.db*"):
        for file in path.rglob("*") if path.is_dir() else [path]:
            stored += file.read_bytes() if file.is_file() else b""
    with sqlite3.connect(gateway.database_url.removeprefix("sqlite:///")) as conn:
        sealed = conn.execute(
            "SELECT payload_sealed, result_sealed FROM jobs WHERE id = ?", (finished.id[5:],)
        ).fetchone()
    assert sealed[0] and sealed[1]  # the job holds both, sealed
    assert text.encode() not in stored


def test_a_capturing_keys_bodies_are_kept(gateway: GatewayProcess) -> None:
    with _client(gateway, CAPTURED_KEY) as captured:
        raw = captured.responses.with_raw_response.create(
            model="bg", input="kept on purpose", background=True
        )
        finished = done(captured, raw.parse().id)
    request_id = raw.headers["x-request-id"]
    assert gateway.records([request_id])[request_id]["status_code"] == 200
    with sqlite3.connect(gateway.database_url.removeprefix("sqlite:///")) as conn:
        request_body, response_body = conn.execute(
            "SELECT request_body, response_body FROM request_payloads WHERE request_id = ?",
            (request_id,),
        ).fetchone()
    assert orjson.loads(request_body)["input"] == "kept on purpose"
    assert orjson.loads(response_body)["id"] == finished.id
    assert orjson.loads(response_body)["output"][0]["content"][0]["text"] == "kept on purpose"


def test_gone_after_its_ttl(upstream: MockUpstream, tmp_path: Path) -> None:
    """LLMRELAY_BACKGROUND_TTL_S from submission: then a 404, and the runner deletes it; a job
    whose limits reset only after its TTL fails at once instead of waiting in vain."""
    env = {"LLMRELAY_BACKGROUND_TTL_S": "3", "LLMRELAY_JOBS_PRUNE_INTERVAL_S": "1"}
    process = GatewayProcess(tmp_path, config=background_config(upstream), env=env).start()
    try:
        with _client(process) as short, _client(process, LIMITED_KEY) as limited:
            submitted = time.monotonic()
            finished = done(
                short, short.responses.create(model="bg", input="brief", background=True).id
            )
            assert finished.status == "completed"
            done(limited, limited.responses.create(model="bg", input="a", background=True).id)
            refused = done(
                limited, limited.responses.create(model="bg", input="b", background=True).id
            )
            assert refused.status == "failed" and refused.error is not None
            assert str(refused.error.code) == "rpm_limit_exceeded"
            time.sleep(max(0.0, submitted + 3.2 - time.monotonic()))
            with pytest.raises(openai.NotFoundError):
                short.responses.retrieve(finished.id)
            with pytest.raises(openai.NotFoundError):
                short.responses.cancel(finished.id)
        path = process.database_url.removeprefix("sqlite:///")
        deadline = time.monotonic() + 15
        while True:
            with sqlite3.connect(path) as conn:
                left = conn.execute(
                    "SELECT COUNT(*) FROM jobs WHERE id = ?", (finished.id[5:],)
                ).fetchone()[0]
            if left == 0:
                break
            assert time.monotonic() < deadline, "the expired job was not pruned"
            time.sleep(0.2)
    finally:
        assert process.stop() == 0, process.logs()

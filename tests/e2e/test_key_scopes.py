"""Key scopes through a real gateway process and the real mock upstream: a key declared in
the YAML with scopes calls the APIs it names and is refused every other one with a 403 in the
calling protocol's own error shape (OpenAI's through the openai SDK, Anthropic's through the
anthropic SDK, Google's over raw HTTP), code `scope_not_allowed` naming the API, before
anything reaches a provider; a key without scopes calls everything; scopes changed through
the admin API take effect within the reload window."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.worker_process import WorkerProcess

ALL_KEY = "e2e-scopes-all-0123456789"
CHAT_KEY = "e2e-scopes-chat-0123456789"
MESSAGES_KEY = "e2e-scopes-messages-0123456789"
GEMINI_KEY = "e2e-scopes-gemini-0123456789"
ADMIN_TOKEN = "e2e-scopes-admin-token-0123456789"
SECRET = "sk-provider-secret-scopes"
HELLO: Any = [{"role": "user", "content": "hello"}]
GEMINI_ASK = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}


def config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: oai, type: openai, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: claude, type: anthropic, base_url: "{upstream.root_url}", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{upstream.root_url}", api_key: {SECRET}}}
models:
  - name: chat
    routes: [{{provider: oai, upstream_model: echo}}]
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: gemini
    routes: [{{provider: google, upstream_model: gemini-test}}]
  - name: emb
    embedding: true
    routes: [{{provider: oai, upstream_model: emb-upstream}}]
projects:
  - name: scopes
    keys:
      - {{name: all, key: {ALL_KEY}}}
      - {{name: chat-only, key: {CHAT_KEY}, scopes: [chat, models]}}
      - {{name: messages-only, key: {MESSAGES_KEY}, scopes: [messages]}}
      - {{name: gemini-only, key: {GEMINI_KEY}, scopes: [gemini-native]}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(
        tmp_path_factory.mktemp("scopes"),
        config(upstream),
        env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN},
    )


def _openai(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=gateway.base_url, max_retries=0, timeout=15)


def _anthropic(gateway: GatewayProcess, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=gateway.url, max_retries=0, timeout=15)


def _gemini(gateway: GatewayProcess, key: str, path: str, body: Any = None) -> httpx.Response:
    headers = {"x-goog-api-key": key}
    if body is None:
        return httpx.get(f"{gateway.url}{path}", headers=headers, timeout=15)
    return httpx.post(f"{gateway.url}{path}", headers=headers, json=body, timeout=15)


def _raw(gateway: GatewayProcess, key: str, method: str, path: str, **extra: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", **extra.pop("headers", {})}
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=15, **extra)


def _openai_refusal(call: Callable[[], Any], api: str) -> None:
    with pytest.raises(openai.PermissionDeniedError) as refused:
        call()
    body = refused.value.body
    assert isinstance(body, dict)
    assert body["code"] == "scope_not_allowed", body
    assert body["type"] == "permission_error"
    assert repr(api) in body["message"]


def _anthropic_refusal(call: Callable[[], Any], api: str) -> None:
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        call()
    body = refused.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "permission_error"
    assert "scope_not_allowed" in body["error"]["message"]
    assert repr(api) in body["error"]["message"]
    assert body["request_id"] == refused.value.response.headers["x-request-id"]


def _google_refusal(answer: httpx.Response) -> None:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == 403
    assert error["status"] == "PERMISSION_DENIED"
    assert "'gemini-native'" in error["message"]
    reasons = [d.get("reason") for d in error.get("details", [])]
    assert "scope_not_allowed" in reasons, error


def test_a_key_without_scopes_calls_every_api(gateway: GatewayProcess) -> None:
    with _openai(gateway, ALL_KEY) as client:
        assert client.chat.completions.create(model="chat", messages=HELLO).choices
        assert client.embeddings.create(model="emb", input="hello").data
        assert client.responses.create(model="chat", input="hello").output_text
        assert {m.id for m in client.models.list()} >= {"chat", "claude", "gemini"}
    with _anthropic(gateway, ALL_KEY) as claude:
        assert claude.messages.create(model="claude", max_tokens=16, messages=HELLO).content
    generated = _raw(
        gateway, ALL_KEY, "POST", "/v1/generate", json={"model": "chat", "prompt": "hi"}
    )
    assert generated.status_code == 200, generated.text
    answer = _gemini(gateway, ALL_KEY, "/v1beta/models/gemini:generateContent", GEMINI_ASK)
    assert answer.status_code == 200, answer.text


def test_a_chat_key_is_refused_every_other_api_in_the_callers_shape(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    sent_before = len(upstream.requests)
    with _openai(gateway, CHAT_KEY) as client:
        assert client.chat.completions.create(model="chat", messages=HELLO).choices
        assert {m.id for m in client.models.list()} >= {"chat"}
        _openai_refusal(lambda: client.embeddings.create(model="emb", input="x"), "embeddings")
        _openai_refusal(lambda: client.responses.create(model="chat", input="x"), "responses")
        _openai_refusal(lambda: client.responses.retrieve("resp_" + "0" * 32), "responses")
    with _anthropic(gateway, CHAT_KEY) as claude:
        _anthropic_refusal(
            lambda: claude.messages.create(model="claude", max_tokens=16, messages=HELLO),
            "messages",
        )
        _anthropic_refusal(
            lambda: claude.messages.count_tokens(model="claude", messages=HELLO), "messages"
        )
    generated = _raw(
        gateway, CHAT_KEY, "POST", "/v1/generate", json={"model": "chat", "prompt": "x"}
    )
    assert generated.status_code == 403, generated.text
    assert generated.json()["error"]["code"] == "scope_not_allowed"
    polled = _raw(gateway, CHAT_KEY, "GET", "/v1/generate/gen_" + "0" * 32)
    assert polled.status_code == 403 and polled.json()["error"]["code"] == "scope_not_allowed"
    _google_refusal(_gemini(gateway, CHAT_KEY, "/v1beta/models/gemini:generateContent", GEMINI_ASK))
    _google_refusal(_gemini(gateway, CHAT_KEY, "/v1beta/models"))
    # Only the chat call reached a provider: every refusal came before any upstream call.
    assert len(upstream.requests) == sent_before + 1


def test_a_messages_key_calls_messages_only(gateway: GatewayProcess) -> None:
    with _anthropic(gateway, MESSAGES_KEY) as claude:
        assert claude.messages.create(model="claude", max_tokens=16, messages=HELLO).content
        assert claude.messages.count_tokens(model="claude", messages=HELLO).input_tokens > 0
        # The model list is its own scope; Anthropic's SDK gets Anthropic's shape.
        _anthropic_refusal(lambda: claude.models.list(), "models")
    with _openai(gateway, MESSAGES_KEY) as client:
        _openai_refusal(
            lambda: client.chat.completions.create(model="chat", messages=HELLO), "chat"
        )
        _openai_refusal(lambda: client.models.list(), "models")


def test_a_gemini_key_calls_the_gemini_api_only(gateway: GatewayProcess) -> None:
    answer = _gemini(gateway, GEMINI_KEY, "/v1beta/models/gemini:generateContent", GEMINI_ASK)
    assert answer.status_code == 200, answer.text
    listed = _gemini(gateway, GEMINI_KEY, "/v1beta/models")
    assert listed.status_code == 200 and listed.json()["models"]
    stream = _gemini(
        gateway, GEMINI_KEY, "/v1beta/models/gemini:streamGenerateContent?alt=sse", GEMINI_ASK
    )
    assert stream.status_code == 200, stream.text
    with _openai(gateway, GEMINI_KEY) as client:
        _openai_refusal(
            lambda: client.chat.completions.create(model="chat", messages=HELLO, stream=True),
            "chat",
        )
    refused = _raw(gateway, GEMINI_KEY, "POST", "/v1/messages", json={})
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "permission_error"


def test_the_refusal_is_recorded(gateway: GatewayProcess) -> None:
    answer = _raw(
        gateway, CHAT_KEY, "POST", "/v1/embeddings", json={"model": "emb", "input": "hello"}
    )
    assert answer.status_code == 403
    request_id = answer.headers["x-request-id"]
    record = gateway.records([request_id])[request_id]
    assert record["status_code"] == 403
    assert record["error_code"] == "scope_not_allowed"


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{gateway.url}/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=15,
    ) as client:
        yield client


#: The reload window is 2 s (LLMRELAY_SNAPSHOT_POLL_S); the ceiling for seeing a change is
#: generous, since a loaded two-core machine can take seconds for each request of the poll.
RELOADED_WITHIN_S = 30.0


def _wait_for(done: Callable[[], bool], within_s: float = RELOADED_WITHIN_S) -> None:
    deadline = time.monotonic() + within_s
    while not done():
        assert time.monotonic() < deadline, "not within the reload window"
        time.sleep(0.05)


def _chat_status(gateway: GatewayProcess, key: str) -> int:
    return _raw(
        gateway, key, "POST", "/v1/chat/completions", json={"model": "chat", "messages": HELLO}
    ).status_code


def test_scopes_changed_through_the_admin_api_apply_within_the_reload_window(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    (project,) = [p for p in admin.get("/projects").json()["data"] if p["name"] == "scopes"]
    url = f"/projects/{project['id']}/keys"
    refused = admin.post(url, json={"name": "bad-scope", "scopes": ["chat", "admin"]})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["field"] == "scopes[1]"
    names = [
        k["name"] for k in admin.get("/keys", params={"project_id": project["id"]}).json()["data"]
    ]
    assert "bad-scope" not in names

    created = admin.post(url, json={"name": "changing", "scopes": ["embeddings"]})
    assert created.status_code == 201, created.text
    key_id, secret = created.json()["id"], created.json()["key"]
    _wait_for(lambda: _chat_status(gateway, secret) == 403)

    current = admin.get(f"/keys/{key_id}")
    changed = admin.patch(
        f"/keys/{key_id}", json={"scopes": ["chat"]}, headers={"If-Match": current.headers["ETag"]}
    )
    assert changed.status_code == 200, changed.text
    _wait_for(lambda: _chat_status(gateway, secret) == 200)

    current = admin.get(f"/keys/{key_id}")
    narrowed = admin.patch(
        f"/keys/{key_id}",
        json={"scopes": ["embeddings"]},
        headers={"If-Match": current.headers["ETag"]},
    )
    assert narrowed.status_code == 200, narrowed.text
    _wait_for(lambda: _chat_status(gateway, secret) == 403)


def test_a_queued_job_of_a_key_whose_scopes_were_narrowed_does_not_run(
    upstream: MockUpstream, tmp_path: Path, closing: Closing
) -> None:
    """`serve` runs no jobs here: a background response queued by a `responses` key waits
    while the key's scopes become `chat` only; the worker that takes it then refuses it
    (`scope_not_allowed`, recorded) and the provider is never called for it."""
    key = "e2e-scopes-queued-0123456789"
    yaml = f"""
providers:
  - {{slug: oai, type: openai, base_url: "{upstream.base_url}", api_key: {SECRET}}}
models:
  - name: queued-chat
    routes: [{{provider: oai, upstream_model: echo}}]
projects:
  - name: queued
    keys: [{{name: q, key: {key}, scopes: [responses]}}]
"""
    env = {"LLMRELAY_JOBS_IN_PROCESS": "false", "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    for gateway in serving(tmp_path, yaml, env=env):
        client = closing(
            openai.OpenAI(api_key=key, base_url=gateway.base_url, max_retries=0, timeout=15)
        )
        raw = client.responses.with_raw_response.create(
            model="queued-chat", input="never sent", background=True
        )
        queued = raw.parse()
        assert queued.status == "queued"
        with httpx.Client(
            base_url=f"{gateway.url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=15,
        ) as admin:
            (row,) = [k for k in admin.get("/keys").json()["data"] if k["name"] == "q"]
            current = admin.get(f"/keys/{row['id']}")
            changed = admin.patch(
                f"/keys/{row['id']}",
                json={"scopes": ["chat"]},
                headers={"If-Match": current.headers["ETag"]},
            )
            assert changed.status_code == 200, changed.text
        sent_before = len(upstream.requests)
        worker_env = {"LLMRELAY_DATABASE_URL": gateway.database_url}
        worker = WorkerProcess(tmp_path, "scopes", worker_env).start()
        try:
            request_id = raw.headers["x-request-id"]
            record = gateway.records([request_id], timeout_s=90)[request_id]
        finally:
            assert worker.stop() == 0, worker.logs()
        assert (record["status_code"], record["error_code"]) == (403, "scope_not_allowed")
        assert len(upstream.requests) == sent_before
        polled = _raw(gateway, key, "GET", f"/v1/responses/{queued.id}")
        assert polled.status_code == 403  # and the key may not read responses any more

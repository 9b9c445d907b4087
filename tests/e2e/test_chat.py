"""The official openai SDK against a running gateway and a real upstream server."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.e2e.conftest import KEY, KEY_LIMITED, UPSTREAM_SECRET
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

MESSAGE = "the quick brown fox jumps over the lazy dog"


def test_chat_completion_passes_through_and_names_the_virtual_model(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": MESSAGE}],
        temperature=0.3,
        extra_body={"vendor_field": {"x": 1}},
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == MESSAGE
    assert completion.model == "chat"
    assert completion.usage is not None and completion.usage.completion_tokens == 9
    assert raw.headers["x-llmrelay-model"] == "chat"
    assert raw.headers["x-llmrelay-provider"] == "up"
    assert raw.headers["x-request-id"].startswith("req_")

    sent = upstream.chat_requests()[-1]
    assert sent.body["model"] == "echo"
    assert sent.body["temperature"] == 0.3
    assert sent.body["vendor_field"] == {"x": 1}
    assert sent.body["messages"] == [{"role": "user", "content": MESSAGE}]
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_SECRET}"
    assert KEY not in repr(sent.headers)
    # Our id travels under a header of its own, never as the provider's own request id.
    assert sent.headers["x-llmrelay-client-request-id"] == raw.headers["x-request-id"]
    assert "x-request-id" not in {name.lower() for name in sent.headers}


def test_streamed_chat_every_chunk_names_the_virtual_model(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": MESSAGE}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.model == "chat" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == MESSAGE
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9


def test_a_stream_that_arrives_in_one_piece_is_relayed_whole(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="burst",
            messages=[{"role": "user", "content": MESSAGE}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == MESSAGE
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9
    assert all(c.model == "burst" for c in chunks)


def test_stream_wire_format_ends_with_done(gateway: GatewayProcess) -> None:
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "chat", "stream": True, "messages": [{"role": "user", "content": "a b"}]},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-llmrelay-provider"] == "up"
        body = response.read()
    events = [e for e in body.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events)
    assert events[-1] == b"data: [DONE]"
    assert b'"model":"echo"' not in body


def test_x_api_key_header_authenticates(gateway: GatewayProcess) -> None:
    response = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"x-api-key": KEY},
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "hi"


def test_embeddings_float_and_base64(client: openai.OpenAI, upstream: MockUpstream) -> None:
    result = client.embeddings.create(model="emb", input=["abc", "hello"], encoding_format="float")
    assert result.model == "emb"
    assert [d.embedding for d in result.data] == [[3.0, 0.5, -0.25], [5.0, 0.5, -0.25]]
    default = client.embeddings.create(model="emb", input="abcd")  # the SDK asks for base64
    assert default.data[0].embedding == [4.0, 0.5, -0.25]
    assert upstream.requests[-1].body["model"] == "emb-upstream"


def test_models_list_follows_the_key_allowlist(
    gateway: GatewayProcess, client: openai.OpenAI
) -> None:
    everything = {m.id for m in client.models.list()}
    assert {"chat", "emb", "chat-failover"} <= everything
    with openai.OpenAI(api_key=KEY_LIMITED, base_url=gateway.base_url, max_retries=0) as limited:
        assert [m.id for m in limited.models.list()] == ["chat"]


def test_client_request_id_is_kept_and_bad_ones_replaced(gateway: GatewayProcess) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    auth = {"Authorization": f"Bearer {KEY}"}
    kept = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={**auth, "X-Request-ID": "my-id_1"},
        json=body,
    )
    assert kept.headers["x-request-id"] == "my-id_1"
    replaced = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={**auth, "X-Request-ID": "bad id!"},
        json=body,
    )
    assert replaced.headers["x-request-id"].startswith("req_")
    error = httpx.post(
        f"{gateway.base_url}/chat/completions", headers={"X-Request-ID": "err-1"}, json=body
    )
    assert error.headers["x-request-id"] == "err-1"
    assert error.json()["request_id"] == "err-1"


def test_pinning_keeps_to_one_provider(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="pinned:up2", messages=[{"role": "user", "content": "x"}]
    )
    assert raw.headers["x-llmrelay-provider"] == "up2"
    assert raw.parse().model == "pinned"
    with pytest.raises(openai.NotFoundError, match="no route to provider 'nope'"):
        client.chat.completions.create(
            model="pinned:nope", messages=[{"role": "user", "content": "x"}]
        )

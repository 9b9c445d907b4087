"""The mock upstream's azure_openai protocol, driven by the official `openai` SDK and by raw
HTTP: the e2e tests of the gateway's adapter trust this wire format, so it is checked here
first."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import orjson
import pytest

from tests.support.mock_upstream import MockUpstream

AZURE_KEY = "azure-mock-0123456789"
AZURE_VERSION = "2024-10-21"


def _azure(upstream: MockUpstream, deployment: str, **body: Any) -> httpx2.Response:
    return httpx2.post(
        f"{upstream.root_url}/openai/deployments/{deployment}/chat/completions",
        params={"api-version": AZURE_VERSION},
        json={"messages": [{"role": "user", "content": "one two three"}], **body},
        headers={"api-key": AZURE_KEY},
        timeout=10,
    )


def test_azure_deployment_is_the_model_when_the_body_names_none(upstream: MockUpstream) -> None:
    answer = _azure(upstream, "fail-first-1-azure")
    assert answer.status_code == 503  # the deployment's behaviour, with the OpenAI error body
    assert answer.json()["error"]["type"] == "upstream_test"
    answer = _azure(upstream, "fail-first-1-azure")
    assert answer.json()["choices"][0]["message"]["content"] == "one two three"
    assert answer.json()["model"] == "fail-first-1-azure-2024-07-18"
    sent = upstream.requests[-1]
    assert sent.path == "/openai/deployments/fail-first-1-azure/chat/completions"
    assert "model" not in sent.body
    assert sent.query == {"api-version": AZURE_VERSION} and sent.headers["api-key"] == AZURE_KEY


def test_azure_streams_like_openai(upstream: MockUpstream) -> None:
    response = _azure(upstream, "gpt-4o", stream=True)
    events = response.content.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    pieces = [orjson.loads(e[6:])["choices"][0]["delta"].get("content") for e in events[:-2]]
    assert "".join(p for p in pieces if p) == "one two three"


def test_azure_sdk_chats_and_embeds(upstream: MockUpstream) -> None:
    client = openai.AzureOpenAI(
        azure_endpoint=upstream.root_url,
        api_key=AZURE_KEY,
        api_version=AZURE_VERSION,
        max_retries=0,
        timeout=10,
    )
    chat = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hello azure"}]
    )
    assert chat.choices[0].message.content == "hello azure"
    embedding = client.embeddings.create(model="embedder", input="four")
    assert embedding.data[0].embedding == [4.0, 0.5, -0.25]
    assert upstream.requests[-1].path == "/openai/deployments/embedder/embeddings"
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="content-filter", messages=[{"role": "user", "content": "x"}]
        )
    assert raised.value.code == "content_filter"


def test_azure_content_filter_is_the_documented_400(upstream: MockUpstream) -> None:
    response = _azure(upstream, "gpt-4o", model="content-filter")
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"], error["status"]) == (
        "content_filter",
        "prompt",
        None,
        400,
    )
    assert error["message"].startswith("The response was filtered due to the prompt triggering")
    assert error["innererror"]["code"] == "ResponsibleAIPolicyViolation"
    assert error["innererror"]["content_filter_result"] == {
        "hate": {"filtered": True, "severity": "high"},
        "self_harm": {"filtered": False, "severity": "safe"},
        "sexual": {"filtered": False, "severity": "safe"},
        "violence": {"filtered": False, "severity": "safe"},
    }


def test_azure_needs_a_key_and_an_api_version(upstream: MockUpstream) -> None:
    url = f"{upstream.root_url}/openai/deployments/gpt-4o/chat/completions"
    body = {"messages": [{"role": "user", "content": "x"}]}
    no_key = httpx2.post(url, params={"api-version": AZURE_VERSION}, json=body, timeout=10)
    assert no_key.status_code == 401
    assert no_key.json()["error"]["code"] == "401"
    assert no_key.json()["error"]["message"].startswith("Access denied")
    no_version = httpx2.post(url, headers={"api-key": AZURE_KEY}, json=body, timeout=10)
    assert no_version.status_code == 404
    assert no_version.json() == {"error": {"code": "404", "message": "Resource not found"}}

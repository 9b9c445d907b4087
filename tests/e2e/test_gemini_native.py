"""Gemini's own API (`/v1beta/models/MODEL:METHOD`) through a real gateway process, with raw
HTTP requests in Google's shapes: passed through to a gemini provider (only the model in the
URL changed), translated through chat to an OpenAI-compatible and an Anthropic one; answers,
both stream framings, token counts, embeddings, the model list, every way to present a key,
and errors in Google's shape (unknown paths included). The providers are one real mock
server speaking each wire format."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-gemini-key-0123456789"
NARROW_KEY = "e2e-gemini-narrow-0123456789"
MASKED_KEY = "e2e-gemini-masked-0123456789"
BLOCKED_KEY = "e2e-gemini-blocked-0123456789"
LIMITED_KEY = "e2e-gemini-limited-0123456789"
EMAIL = "jane.doe@example.com"
AWS = "AKIAIOSFODNN7EXAMPLE"
SECRET = "sk-provider-secret-gemini"
TEXT = "the quick brown fox jumps over the lazy dog"
MODELS = ["gemini", "compat", "claude"]


def gemini_config(upstream: MockUpstream) -> str:
    root = upstream.root_url
    return f"""
providers:
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: compat, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
models:
  - name: gemini
    routes: [{{provider: google, upstream_model: gemini-test}}]
  - name: compat
    routes: [{{provider: compat, upstream_model: echo}}]
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: gemini-rejects
    routes: [{{provider: google, upstream_model: status-400}}]
  - name: gemini-drop
    routes: [{{provider: google, upstream_model: drop-after-1}}]
  - name: gemini-embed
    embedding: true
    routes: [{{provider: google, upstream_model: text-embedding-test}}]
  - name: compat-embed
    embedding: true
    routes: [{{provider: compat, upstream_model: echo-embed}}]
guardrails:
  policies:
    - name: secrets-block
      rules: [{{detector: secrets, action: block}}]
    - name: pii-mask
      rules: [{{detector: pii, action: mask}}]
projects:
  - name: gemini
    keys:
      - {{name: k, key: {KEY}}}
      - {{name: narrow, key: {NARROW_KEY}, models: [compat]}}
      - {{name: masked, key: {MASKED_KEY}, guardrails: [pii-mask]}}
      - {{name: blocked, key: {BLOCKED_KEY}, guardrails: [secrets-block]}}
      - {{name: limited, key: {LIMITED_KEY}, limits: {{rpm: 1}}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("gemini"), gemini_config(upstream))


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, headers={"x-goog-api-key": KEY}) as made:
        yield made


def ask(text: str = TEXT, **extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def texts(response: dict[str, Any]) -> str:
    parts = response["candidates"][0]["content"].get("parts") or []
    return "".join(p.get("text", "") for p in parts if not p.get("thought"))


def sse_events(body: bytes) -> list[dict[str, Any]]:
    events = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        if block.startswith(b"data: "):
            events.append(orjson.loads(block[6:]))
    return events


@pytest.mark.parametrize("model", MODELS)
def test_generate_content_from_every_kind_of_provider(
    client: httpx.Client, gateway: GatewayProcess, model: str
) -> None:
    answer = client.post(f"/v1beta/models/{model}:generateContent", json=ask())
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert texts(body).strip() == TEXT
    assert body["candidates"][0]["finishReason"] == "STOP"
    assert body["modelVersion"] == model  # the virtual model, never the upstream's
    assert body["usageMetadata"]["promptTokenCount"] > 0
    assert answer.headers["x-llmrelay-model"] == model
    record = gateway.records([answer.headers["x-request-id"]])[answer.headers["x-request-id"]]
    assert record["endpoint"] == "gemini.generate_content"
    assert record["protocol"] == "gemini"
    assert record["virtual_model"] == model
    assert record["prompt_tokens"] > 0 and record["completion_tokens"] > 0


def test_a_gemini_provider_gets_the_body_as_sent(
    client: httpx.Client, upstream: MockUpstream
) -> None:
    sent = ask(
        systemInstruction={"parts": [{"text": "be brief"}]},
        generationConfig={"temperature": 0.5, "topK": 7, "thinkingConfig": {"thinkingBudget": 0}},
        safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        someFutureField={"kept": True},
    )
    answer = client.post("/v1beta/models/gemini:generateContent", json=sent)
    assert answer.status_code == 200, answer.text
    received = [r for r in upstream.requests if r.path.endswith("gemini-test:generateContent")][-1]
    assert received.body == sent  # passed through: only the model (in the URL) changed
    assert received.headers["x-goog-api-key"] == SECRET


def test_a_provider_reached_through_chat_gets_chat(
    client: httpx.Client, upstream: MockUpstream
) -> None:
    sent = ask(
        systemInstruction={"parts": [{"text": "be brief"}]},
        generationConfig={"temperature": 0.5, "maxOutputTokens": 50, "stopSequences": ["END"]},
        safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    )
    answer = client.post("/v1beta/models/compat:generateContent", json=sent)
    assert answer.status_code == 200, answer.text
    received = upstream.chat_requests()[-1].body
    assert received["model"] == "echo"
    assert received["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": TEXT},
    ]
    assert received["temperature"] == 0.5
    assert received["max_tokens"] == 50
    assert received["stop"] == ["END"]
    assert "safetySettings" not in received


@pytest.mark.parametrize("model", MODELS)
def test_streams_as_server_sent_events(client: httpx.Client, model: str) -> None:
    answer = client.post(f"/v1beta/models/{model}:streamGenerateContent?alt=sse", json=ask())
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = sse_events(answer.content)
    assert len(events) >= 2
    assert "".join(texts(e) for e in events).strip() == TEXT
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    assert events[-1]["usageMetadata"]["totalTokenCount"] > 0
    assert {e["modelVersion"] for e in events} == {model}


@pytest.mark.parametrize("model", MODELS)
def test_streams_as_one_json_array_without_alt_sse(client: httpx.Client, model: str) -> None:
    with client.stream("POST", f"/v1beta/models/{model}:streamGenerateContent", json=ask()) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/json")
        body = r.read()
    events = orjson.loads(body)
    assert isinstance(events, list) and len(events) >= 2
    assert "".join(texts(e) for e in events).strip() == TEXT
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"


def test_function_calling_with_a_gemini_provider(client: httpx.Client) -> None:
    tools = [
        {
            "functionDeclarations": [
                {
                    "name": "lookup",
                    "description": "Looks something up.",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {"query": {"type": "STRING"}},
                        "required": ["query"],
                    },
                }
            ]
        }
    ]
    answer = client.post(
        "/v1beta/models/gemini:generateContent", json=ask("call:weather in Paris", tools=tools)
    ).json()
    part = answer["candidates"][0]["content"]["parts"][0]
    assert part["functionCall"] == {"name": "lookup", "args": {"query": "weather in Paris"}}
    history = ask("call:weather in Paris", tools=tools)
    history["contents"] += [
        {"role": "model", "parts": [part]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "lookup", "response": {"output": "sunny"}}}],
        },
    ]
    final = client.post("/v1beta/models/gemini:generateContent", json=history).json()
    assert texts(final) == 'result: {"output":"sunny"}'


def test_count_tokens(client: httpx.Client, upstream: MockUpstream) -> None:
    asked = client.post("/v1beta/models/gemini:countTokens", json=ask("one two three four"))
    assert asked.status_code == 200, asked.text
    assert asked.json() == {"totalTokens": 4}  # the provider's count (the mock counts words)
    assert upstream.requests[-1].path.endswith("gemini-test:countTokens")
    estimated = client.post("/v1beta/models/compat:countTokens", json=ask("x" * 400))
    assert estimated.status_code == 200, estimated.text
    assert estimated.headers["x-llmrelay-estimated"] == "true"
    assert 100 <= estimated.json()["totalTokens"] <= 130


@pytest.mark.parametrize("model", ["gemini-embed", "compat-embed"])
def test_embeddings(client: httpx.Client, upstream: MockUpstream, model: str) -> None:
    one = client.post(
        f"/v1beta/models/{model}:embedContent",
        json={"content": {"parts": [{"text": "hello world"}]}, "outputDimensionality": 4},
    )
    assert one.status_code == 200, one.text
    values = one.json()["embedding"]["values"]
    assert values and all(isinstance(v, float) for v in values)
    received = upstream.requests[-1]
    if model == "gemini-embed":  # passed through
        assert received.path.endswith("text-embedding-test:embedContent")
        assert received.body["outputDimensionality"] == 4 and len(values) == 4
    else:  # OpenAI's embeddings API (the mock's vectors are always 3 long)
        assert received.path.endswith("/embeddings")
        assert received.body == {
            "model": "echo-embed",
            "input": ["hello world"],
            "encoding_format": "float",
            "dimensions": 4,
        }
        assert values == [11.0, 0.5, -0.25]
    batch = client.post(
        f"/v1beta/models/{model}:batchEmbedContents",
        json={
            "requests": [
                {"model": f"models/{model}", "content": {"parts": [{"text": "a"}]}},
                {"model": f"models/{model}", "content": {"parts": [{"text": "b c"}]}},
            ]
        },
    )
    assert batch.status_code == 200, batch.text
    vectors = [e["values"] for e in batch.json()["embeddings"]]
    assert len(vectors) == 2 and vectors[0] != vectors[1]


def test_batch_embeddings_reach_a_gemini_provider_with_its_model(
    client: httpx.Client, upstream: MockUpstream
) -> None:
    client.post(
        "/v1beta/models/gemini-embed:batchEmbedContents",
        json={
            "requests": [{"model": "models/gemini-embed", "content": {"parts": [{"text": "a"}]}}]
        },
    )
    received = upstream.requests[-1]
    assert received.path.endswith("text-embedding-test:batchEmbedContents")
    assert received.body["requests"][0]["model"] == "models/text-embedding-test"


def test_the_model_list_and_one_model(client: httpx.Client) -> None:
    listed = client.get("/v1beta/models")
    assert listed.status_code == 200, listed.text
    names = [m["name"] for m in listed.json()["models"]]
    assert "models/gemini" in names and "models/compat-embed" in names
    one = client.get("/v1beta/models/gemini").json()
    assert one["name"] == "models/gemini"
    assert "generateContent" in one["supportedGenerationMethods"]
    embed = client.get("/v1beta/models/gemini-embed").json()
    assert embed["supportedGenerationMethods"] == ["embedContent", "batchEmbedContents"]
    missing = client.get("/v1beta/models/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"x-goog-api-key": KEY}, ""),
        ({}, f"?key={KEY}"),
        ({"authorization": f"Bearer {KEY}"}, ""),
        ({"x-api-key": KEY}, ""),
    ],
    ids=["x-goog-api-key", "query", "bearer", "x-api-key"],
)
def test_every_way_to_present_a_key(
    gateway: GatewayProcess, headers: dict[str, str], query: str
) -> None:
    with httpx.Client(base_url=gateway.url, headers=headers) as bare:
        answer = bare.post(f"/v1beta/models/compat:generateContent{query}", json=ask())
        assert answer.status_code == 200, answer.text
        listed = bare.get(f"/v1beta/models{query}")
        assert listed.status_code == 200, listed.text


def google_error(response: httpx.Response, status: int, name: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == status and error["status"] == name
    assert isinstance(error["message"], str) and error["message"]
    return error


def test_errors_are_in_googles_shape(gateway: GatewayProcess, client: httpx.Client) -> None:
    with httpx.Client(base_url=gateway.url) as bare:
        error = google_error(
            bare.post("/v1beta/models/compat:generateContent", json=ask()),
            401,
            "UNAUTHENTICATED",
        )
        assert "x-goog-api-key" in error["message"]
        google_error(
            bare.post("/v1beta/models/compat:generateContent?key=wrong-key", json=ask()),
            401,
            "UNAUTHENTICATED",
        )
        google_error(bare.get("/v1beta/models"), 401, "UNAUTHENTICATED")
    with httpx.Client(base_url=gateway.url, headers={"x-goog-api-key": NARROW_KEY}) as narrow:
        google_error(
            narrow.post("/v1beta/models/gemini:generateContent", json=ask()),
            403,
            "PERMISSION_DENIED",
        )
    error = google_error(
        client.post("/v1beta/models/nope:generateContent", json=ask()), 404, "NOT_FOUND"
    )
    assert error["details"][0]["reason"] == "model_not_found"
    google_error(
        client.post("/v1beta/models/compat:generateContent", content=b"{not json"),
        400,
        "INVALID_ARGUMENT",
    )
    google_error(
        client.post("/v1beta/models/compat:generateContent", json={"contents": []}),
        400,
        "INVALID_ARGUMENT",
    )
    error = google_error(
        client.post(
            "/v1beta/models/compat:generateContent", json=ask(cachedContent="cachedContents/x")
        ),
        400,
        "INVALID_ARGUMENT",
    )
    assert "cachedContent" in error["message"]
    google_error(
        client.post("/v1beta/models/compat:embedContent", json={"content": {"parts": []}}),
        400,
        "INVALID_ARGUMENT",
    )


def test_a_gemini_providers_own_400_reaches_the_client_as_it_came(client: httpx.Client) -> None:
    error = google_error(
        client.post("/v1beta/models/gemini-rejects:generateContent", json=ask()),
        400,
        "INVALID_ARGUMENT",
    )
    assert error["message"].startswith("upstream says 400")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1beta/models/compat:predict", 404),
        ("GET", "/v1beta/models/compat:generateContent", 405),
        ("GET", "/v1beta/files", 404),
        ("POST", "/v1beta/cachedContents", 404),
        ("GET", "/v1beta", 404),
        ("GET", "/v1alpha/models", 404),
    ],
)
def test_unknown_paths_under_v1beta_answer_googles_json(
    client: httpx.Client, method: str, path: str, status: int
) -> None:
    response = client.request(method, path, json={} if method == "POST" else None)
    google_error(response, status, {404: "NOT_FOUND", 405: "UNIMPLEMENTED"}[status])


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/nothing", "openai"),
        ("/v1/messages/nothing", "anthropic"),
        ("/openai/deployments/x/chat/completions", "openai"),
        ("/api/nothing", "openai"),
    ],
)
def test_unknown_paths_of_the_other_apis_answer_their_json(
    gateway: GatewayProcess, path: str, shape: str
) -> None:
    response = httpx.post(f"{gateway.url}{path}", json={})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    if shape == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    else:
        assert body["error"]["code"] == "not_found"


def test_an_oversized_body_is_refused_in_googles_shape(client: httpx.Client) -> None:
    big = b'{"contents": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    google_error(
        client.post("/v1beta/models/compat:generateContent", content=big),
        413,
        "INVALID_ARGUMENT",
    )


def test_a_stream_that_breaks_after_its_first_byte_ends_with_googles_error(
    client: httpx.Client,
) -> None:
    answer = client.post("/v1beta/models/gemini-drop:streamGenerateContent?alt=sse", json=ask())
    assert answer.status_code == 200
    events = sse_events(answer.content)
    assert "candidates" in events[0]
    assert events[-1]["error"]["status"] == "UNAVAILABLE"
    assert "finishReason" not in str(events)


def test_a_json_array_stream_that_breaks_ends_with_googles_error_in_the_array(
    client: httpx.Client,
) -> None:
    answer = client.post("/v1beta/models/gemini-drop:streamGenerateContent", json=ask())
    assert answer.status_code == 200
    events = orjson.loads(answer.content)  # still one whole JSON array
    assert "candidates" in events[0]
    assert events[-1]["error"]["status"] == "UNAVAILABLE"


@pytest.mark.parametrize(("model", "path"), [("gemini", "gemini-test:"), ("compat", "/chat/")])
def test_a_keys_guardrails_mask_what_reaches_the_provider(
    gateway: GatewayProcess, upstream: MockUpstream, model: str, path: str
) -> None:
    with httpx.Client(base_url=gateway.url, headers={"x-goog-api-key": MASKED_KEY}) as masked:
        answer = masked.post(
            f"/v1beta/models/{model}:generateContent", json=ask(f"write to {EMAIL} today")
        )
    assert answer.status_code == 200, answer.text
    received = [r for r in upstream.requests if path in r.path][-1]
    assert EMAIL not in orjson.dumps(received.body).decode()
    assert "write to" in orjson.dumps(received.body).decode()


def test_a_blocked_request_is_refused_in_googles_shape_and_never_sent(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    before = len(upstream.requests)
    with httpx.Client(base_url=gateway.url, headers={"x-goog-api-key": BLOCKED_KEY}) as blocked:
        answer = blocked.post("/v1beta/models/gemini:generateContent", json=ask(f"key {AWS}"))
    error = google_error(answer, 400, "INVALID_ARGUMENT")
    assert error["details"][0]["reason"] == "content_policy_violation"
    assert len(upstream.requests) == before
    record = gateway.records([answer.headers["x-request-id"]])[answer.headers["x-request-id"]]
    assert record["status_code"] == 400 and record["protocol"] == "gemini"


def test_limits_answer_429_with_googles_retry_hint(gateway: GatewayProcess) -> None:
    with httpx.Client(base_url=gateway.url, headers={"x-goog-api-key": LIMITED_KEY}) as limited:
        first = limited.post("/v1beta/models/compat:generateContent", json=ask())
        assert first.status_code == 200, first.text
        second = limited.post("/v1beta/models/compat:generateContent", json=ask())
    error = google_error(second, 429, "RESOURCE_EXHAUSTED")
    retry = [d for d in error["details"] if d["@type"].endswith("RetryInfo")]
    assert retry and retry[0]["retryDelay"] == f"{second.headers['retry-after']}s"

"""Client errors come back with the contract's status, in the OpenAI error shape."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import KEY, KEY_DISABLED, KEY_EXPIRED, KEY_IP_BOUND, KEY_LIMITED
from tests.support.gateway_process import GatewayProcess

HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def _sdk(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    """Use as `with _sdk(...) as client:` (closed with its connections)."""
    return openai.OpenAI(api_key=key, base_url=gateway.base_url, max_retries=0)


def _post(
    gateway: GatewayProcess, body: bytes | dict[str, object], key: str = KEY
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
    if isinstance(body, bytes):
        return httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, content=body)
    return httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body)


def _assert_openai_error(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "request_id"}
    assert set(body["error"]) == {"message", "type", "code", "param"}
    assert body["error"]["code"] == code
    assert body["request_id"] == response.headers["x-request-id"]
    return dict(body["error"])


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("e2e-no-such-key-0123456789", "invalid API key"),
        (KEY_DISABLED, "API key is disabled"),
        (KEY_EXPIRED, "API key has expired"),
    ],
)
def test_bad_keys_are_401(gateway: GatewayProcess, key: str, message: str) -> None:
    with _sdk(gateway, key) as client, pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="chat", messages=HI)
    assert caught.value.status_code == 401
    assert message in caught.value.message


def test_missing_key_is_401(gateway: GatewayProcess) -> None:
    response = httpx.post(
        f"{gateway.base_url}/chat/completions", json={"model": "chat", "messages": HI}
    )
    _assert_openai_error(response, 401, "invalid_api_key")


def test_ip_outside_allowlist_is_403(gateway: GatewayProcess) -> None:
    with (
        _sdk(gateway, KEY_IP_BOUND) as client,
        pytest.raises(openai.PermissionDeniedError, match="IP allowlist"),
    ):
        client.chat.completions.create(model="chat", messages=HI)


def test_model_outside_allowlist_is_403(gateway: GatewayProcess) -> None:
    with (
        _sdk(gateway, KEY_LIMITED) as client,
        pytest.raises(openai.PermissionDeniedError, match="may not use model 'emb'"),
    ):
        client.embeddings.create(model="emb", input="x")


def test_unknown_model_is_404(gateway: GatewayProcess) -> None:
    with (
        _sdk(gateway, KEY) as client,
        pytest.raises(openai.NotFoundError, match="model 'gpt-nope' does not exist"),
    ):
        client.chat.completions.create(model="gpt-nope", messages=HI)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"", "empty"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "'model' is required"),
        (b'{"model": "chat"}', "'messages' is required"),
        (b'{"model": "chat", "messages": []}', "non-empty array"),
        (b'{"model": "chat", "messages": ["x"]}', "must be an object"),
        (b'{"model": 5, "messages": [{"role": "user"}]}', "'model' must be a non-empty string"),
        (
            b'{"model": "chat", "messages": [{"role": "user"}], "stream": "yes"}',
            "'stream' must be a boolean",
        ),
        (b'{"model": "emb", "messages": [{"role": "user"}]}', "is an embedding model"),
    ],
)
def test_malformed_requests_are_400(gateway: GatewayProcess, body: bytes, fragment: str) -> None:
    error = _assert_openai_error(_post(gateway, body), 400, _code_for(fragment))
    assert fragment in str(error["message"])
    assert error["type"] == "invalid_request_error"


def _code_for(fragment: str) -> str:
    if "is required" in fragment:
        return "missing_required_parameter"
    if "embedding" in fragment:
        return "wrong_model_kind"
    return "invalid_request"


def test_sdk_bad_request_error_for_a_missing_field(gateway: GatewayProcess) -> None:
    with (
        _sdk(gateway, KEY) as client,
        pytest.raises(openai.BadRequestError, match="'input' is required"),
    ):
        client.post("/embeddings", body={"model": "emb"}, cast_to=object)


def test_unknown_path_and_wrong_method(gateway: GatewayProcess) -> None:
    _assert_openai_error(httpx.get(f"{gateway.base_url}/nothing-here"), 404, "not_found")
    _assert_openai_error(
        httpx.get(f"{gateway.base_url}/chat/completions"), 405, "method_not_allowed"
    )


def test_body_over_the_cap_is_413_from_content_length_without_reading_it(
    gateway: GatewayProcess,
) -> None:
    # Announce 10 MB but send none of it: the answer must come without waiting for the body.
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: 10000000\r\n\r\n".encode()
        )
        started = time.monotonic()
        head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"request_too_large" in head or b"content-length" in head.lower()
    # Well before the body's deadline (LLMRELAY_BODY_TIMEOUT_S, 60 s), had it waited for one.
    assert time.monotonic() - started < 20


def test_chunked_body_over_the_cap_is_413(gateway: GatewayProcess) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b"x" * 1024

    response = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        content=chunks(),
    )
    _assert_openai_error(response, 413, "request_too_large")


def _assert_anthropic_error(response: httpx.Response, status: int, kind: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body) == {"type", "error", "request_id"}
    assert body["error"]["type"] == kind and body["error"]["message"]
    assert body["request_id"] == response.headers["x-request-id"]


def test_bodies_over_the_cap_on_anthropic_routes_are_413_in_anthropic_shape(
    gateway: GatewayProcess,
) -> None:
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        declared = httpx.post(f"{gateway.url}{path}", headers=headers, content=b"x" * 200_000)
        _assert_anthropic_error(declared, 413, "request_too_large")
        chunked = httpx.post(
            f"{gateway.url}{path}", headers=headers, content=iter([b"x" * 1024] * 200)
        )
        _assert_anthropic_error(chunked, 413, "request_too_large")
    wrong_method = httpx.get(f"{gateway.url}/v1/messages", headers=headers)
    _assert_anthropic_error(wrong_method, 405, "invalid_request_error")
    unknown = httpx.post(f"{gateway.url}/v1/messages/nothing-here", headers=headers)
    _assert_anthropic_error(unknown, 404, "not_found_error")


def test_a_body_under_the_cap_is_served(gateway: GatewayProcess) -> None:
    text = "y" * 60_000
    response = _post(gateway, {"model": "chat", "messages": [{"role": "user", "content": text}]})
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == text


def test_a_chunked_body_over_the_cap_on_an_admin_route_is_413(gateway: GatewayProcess) -> None:
    """The admin API reads its bodies through the same cap: a body without a Content-Length
    that passes it is refused with a 413 in the error shape, not a 500."""
    response = httpx.post(
        f"{gateway.url}/api/admin/auth/login",
        headers={"content-type": "application/json"},
        content=iter([b"x" * 1024] * 200),
    )
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "request_too_large"
    assert response.headers["x-request-id"]
    assert httpx.get(f"{gateway.url}/readyz").status_code == 200

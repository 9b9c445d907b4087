"""The `openai_codex` provider end to end: a real gateway process and the `llmrelay codex`
command against the stand-in ChatGPT issuer and Codex backend (tests/support/mock_codex.py),
over real HTTP. Sign-in by device code and by browser (PKCE), the Responses API streamed and
not, compaction, the model list, tokens refreshed before they expire and once after a 401,
and an account at its usage limit skipped until its reset."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.codex_flow import (
    CEILING_S,
    admin_client,
    admin_sign_in,
    cli,
    codex_gateway,
    codex_server,
    finished,
    line_matching,
    openai_client,
    provider_id,
    until,
)
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_codex import PNG, MockCodex

KEY = "e2e-codex-key-0123456789"


def codex_config(codex: MockCodex) -> str:
    return f"""
providers:
  - {{slug: codex, type: openai_codex, base_url: "{codex.backend}"}}
  - {{slug: spare, type: mock}}
models:
  - name: codex
    routes: [{{provider: codex, upstream_model: gpt-5-codex}}]
  - name: codex-gpt-image-2
    routes: [{{provider: codex, upstream_model: gpt-image-2}}]
  - name: codex-or-spare
    routes:
      - {{provider: codex, upstream_model: gpt-5-codex, priority: 0}}
      - {{provider: spare, upstream_model: echo, priority: 1}}
projects:
  - name: codex
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def codex() -> Iterator[MockCodex]:
    yield from codex_server()


@pytest.fixture(scope="module")
def gateway(codex: MockCodex, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from codex_gateway(codex, tmp_path_factory.mktemp("codex"), codex_config(codex))


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    yield from openai_client(gateway, KEY)


@pytest.fixture(scope="module")
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    yield from admin_client(gateway)


def device_login(gateway: GatewayProcess, codex: MockCodex) -> None:
    process = cli(gateway, "login", "--provider", "codex", "--device")
    code = line_matching(process, r"enter the code (\S+)").group(1)
    codex.approve(code)
    assert "signed in for provider 'codex'" in finished(process)


@pytest.fixture
def signed_in(admin: httpx.Client, codex: MockCodex, client: openai.OpenAI) -> None:
    """A fresh sign-in for each test that needs one (the tests run in any order), served:
    after a test that signed every account out, the gateway answers 503 until it has read
    the new account."""
    admin_sign_in(admin, codex)
    until(lambda: served(client, "ready"), "the signed-in account served")


def served(client: openai.OpenAI, text: str) -> bool:
    """Whether the gateway answered `text` (the mock backend echoes it). False while it still
    holds the account as it was before a sign-in, until it reads the new one: 503 when an
    earlier test signed every account out, or left it resting at its usage limit (a sign-in
    starts the limits afresh, but the gateway learns of it with its next snapshot)."""
    try:
        return client.responses.create(model="codex", input=text).output_text == text
    except openai.APIStatusError as error:
        if error.status_code != 503:
            raise
        return False


def test_without_an_account_the_route_is_unavailable(
    admin: httpx.Client, codex: MockCodex, client: openai.OpenAI
) -> None:
    """Signed out: 503 naming the missing account, nothing sent upstream."""
    assert admin.delete(f"/providers/{provider_id(admin)}/codex").status_code == 204
    before = len(codex.calls)
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="codex", input="hello")
    assert refused.value.status_code == 503
    assert "no ChatGPT account" in str(refused.value.message)
    assert len(codex.calls) == before


def test_device_code_sign_in_from_the_cli(
    gateway: GatewayProcess, codex: MockCodex, client: openai.OpenAI
) -> None:
    device_login(gateway, codex)
    shown = finished(cli(gateway, "status", "--provider", "codex"))
    assert "codex@example.com (pro)" in shown
    until(lambda: served(client, "cli"), "the account signed in from the CLI served")


def test_a_response(signed_in: None, codex: MockCodex, client: openai.OpenAI) -> None:
    before = len(codex.backend_calls("/responses"))
    answer = client.responses.create(
        model="codex", input="ping from codex", prompt_cache_key="conv-123"
    )
    assert answer.output_text == "ping from codex"
    assert answer.model == "codex"
    _, headers, body = codex.backend_calls("/responses")[before]
    assert headers["chatgpt-account-id"] == codex.account_id
    assert headers["authorization"].startswith("Bearer ")
    assert headers["originator"] == "codex_cli_rs"
    assert headers["openai-beta"] == "responses=experimental"
    assert headers["session_id"] == "conv-123"
    assert body["stream"] is True and body["store"] is False
    assert body["model"] == "gpt-5-codex"


def test_responses_are_stored_by_the_gateway(
    signed_in: None, codex: MockCodex, client: openai.OpenAI
) -> None:
    """The backend keeps nothing: the gateway keeps a codex Response (read back by id, and
    continued from `previous_response_id` by sending the conversation whole, item ids left
    out, `store` still false upstream)."""
    first = client.responses.create(model="codex", input="remember the owl")
    assert first.id.startswith("resp_") and not first.id.startswith("resp_codex")
    read = client.responses.retrieve(first.id)
    assert read.id == first.id and read.output_text == "remember the owl"
    second = client.responses.create(
        model="codex", input="and the fox", previous_response_id=first.id
    )
    assert second.output_text == "and the fox"
    body = codex.backend_calls("/responses")[-1][2]
    assert body["store"] is False and "previous_response_id" not in body
    sent = body["input"]
    assert sent[0] == {"type": "message", "role": "user", "content": "remember the owl"}
    assert sent[1]["type"] == "message" and sent[1]["role"] == "assistant"
    assert "id" not in sent[1]  # the backend stored no item to name
    assert sent[1]["content"][0]["text"] == "remember the owl"
    assert sent[2] == {"type": "message", "role": "user", "content": "and the fox"}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_never_given_out")
    unstored = client.responses.create(model="codex", input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_the_subscription_image_model(
    signed_in: None, codex: MockCodex, client: openai.OpenAI
) -> None:
    """`codex-gpt-image-2` is an image model: POST /v1/images/generations, sent to the
    backend as the Codex CLI generates images (a Responses call forcing the image_generation
    tool, its model the route's `gpt-image-2`), answered as the Images API; chat and
    Responses refuse it, and the images endpoint refuses a text model."""
    drawn = client.images.generate(
        model="codex-gpt-image-2", prompt="an owl at dusk", size="1024x1536", quality="high"
    )
    assert drawn.data is not None and len(drawn.data) == 1
    assert base64.b64decode(drawn.data[0].b64_json or "") == PNG
    assert drawn.data[0].revised_prompt == "an owl at dusk, as drawn by gpt-image-2"
    assert drawn.size == "1024x1536" and drawn.quality == "high"
    assert drawn.usage is not None and drawn.usage.total_tokens > 0
    _, headers, body = codex.backend_calls("/responses")[-1]
    assert headers["chatgpt-account-id"] == codex.account_id
    assert body["tools"] == [
        {"type": "image_generation", "model": "gpt-image-2", "size": "1024x1536", "quality": "high"}
    ]
    assert body["tool_choice"] == {"type": "image_generation"}
    assert body["model"] != "gpt-image-2" and body["stream"] is True and body["store"] is False
    with pytest.raises(openai.BadRequestError) as chat:
        client.responses.create(model="codex-gpt-image-2", input="hello")
    assert "image model" in str(chat.value.message) and "/v1/images/generations" in str(
        chat.value.message
    )
    with pytest.raises(openai.BadRequestError) as text_model:
        client.images.generate(model="codex", prompt="an owl")
    assert "not an image model" in str(text_model.value.message)
    with pytest.raises(openai.BadRequestError) as several:
        client.images.generate(model="codex-gpt-image-2", prompt="owls", n=2)
    assert several.value.body["param"] == "n"  # type: ignore[index]


def test_a_streamed_response(signed_in: None, client: openai.OpenAI) -> None:
    with client.responses.stream(model="codex", input="stream me please") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "stream me please"
    # kept by the gateway as a non-streamed one is: read back, continued
    assert final.id.startswith("resp_") and not final.id.startswith("resp_codex")
    assert client.responses.retrieve(final.id).output_text == "stream me please"
    after = client.responses.create(model="codex", input="next", previous_response_id=final.id)
    assert after.output_text == "next"


def test_compaction(signed_in: None, gateway: GatewayProcess, codex: MockCodex) -> None:
    answer = httpx.post(
        f"{gateway.base_url}/responses/compact",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": "codex", "input": [{"role": "user", "content": "a long talk"}]},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][0]["type"] == "compaction"
    body = codex.backend_calls("/responses/compact")[-1][2]
    assert body["model"] == "gpt-5-codex" and "stream" not in body


def test_model_list_and_usage_limits_in_the_admin_api(
    signed_in: None, admin: httpx.Client, codex: MockCodex
) -> None:
    provider = provider_id(admin)
    probe = admin.post(f"/providers/{provider}/test")
    assert probe.status_code == 200, probe.text
    assert probe.json()["status"] == "online", probe.json()
    assert any(
        call[0].startswith("/backend-api/codex/models?client_version=") for call in codex.calls
    )
    shown = admin.get(f"/providers/{provider}/codex", params={"refresh": "true"})
    assert shown.status_code == 200, shown.text
    account = shown.json()
    assert account["signed_in"] and account["email"] == codex.email
    assert account["plan_type"] == "pro" and account["usage_error"] is None
    assert account["limits"]["primary"]["used_percent"] == codex.used_percent
    assert account["limits"]["secondary"]["window_minutes"] == 10080
    assert "access_token" not in shown.text and "refresh_token" not in shown.text


def test_a_token_about_to_expire_is_refreshed_first(
    gateway: GatewayProcess, codex: MockCodex, client: openai.OpenAI
) -> None:
    """Browser sign-in (PKCE) with tokens that expire within the refresh margin: once the
    gateway reads the new account, its first call refreshes them before it is sent, and the
    refreshed tokens (an hour) serve the next call as they are."""
    codex.token_ttl_s = 120  # under the 300 s margin
    try:
        process = cli(gateway, "login", "--provider", "codex", "--port", "0", "--no-browser")
        url = line_matching(process, r"^(http://\S+/oauth/authorize\?\S+)").group(1)
        assert "code_challenge_method=S256" in url
        landed = httpx.get(url, follow_redirects=True, timeout=30)  # the user's browser
        assert landed.status_code == 200 and "Signed in" in landed.text
        finished(process)
    finally:
        codex.token_ttl_s = 3600
    refreshes = codex.grants.count("refresh_token")

    def refreshed() -> bool:
        return served(client, "fresh") and codex.grants.count("refresh_token") > refreshes

    until(refreshed, "the short-lived tokens refreshed")
    assert codex.grants.count("refresh_token") == refreshes + 1
    assert client.responses.create(model="codex", input="again").output_text == "again"
    assert codex.grants.count("refresh_token") == refreshes + 1


def test_a_refused_token_is_refreshed_once(
    signed_in: None, codex: MockCodex, client: openai.OpenAI
) -> None:
    codex.revoke_access_tokens()  # signed out elsewhere: the held token is refused
    refreshes = codex.grants.count("refresh_token")
    assert client.responses.create(model="codex", input="after 401").output_text == "after 401"
    assert codex.grants.count("refresh_token") == refreshes + 1


def test_a_refused_refresh_makes_the_route_unavailable(
    gateway: GatewayProcess, codex: MockCodex, client: openai.OpenAI
) -> None:
    """Tokens due for a refresh the issuer refuses: 503 saying to sign in again, and the
    issuer is not asked again on the next call."""
    codex.token_ttl_s = 120  # under the 300 s margin: due at once
    try:
        device_login(gateway, codex)
    finally:
        codex.token_ttl_s = 3600
    codex.revoke_refresh_tokens()

    def refused() -> str | None:
        try:
            client.responses.create(model="codex", input="no")
        except openai.APIStatusError as error:
            if error.status_code != 503 or "sign the account in again" not in error.message:
                return None  # the account before (signed out, resting), until it is read
            return str(error.message)
        return None  # the account before, until the gateway reads the new one

    assert "sign the account in again" in until(refused, "the refused refresh")
    refreshes = codex.grants.count("refresh_token")
    assert refused() is not None
    assert codex.grants.count("refresh_token") == refreshes  # not asked again


def test_an_exhausted_account_is_skipped_until_its_reset(
    signed_in: None, codex: MockCodex, client: openai.OpenAI, admin: httpx.Client
) -> None:
    codex.used_percent = 100
    codex.resets_at = time.time() + 3600
    try:
        raw = client.responses.with_raw_response.create(model="codex-or-spare", input="x")
        assert raw.headers["x-llmrelay-provider"] == "spare"  # the 429 moved it on
        calls = len(codex.backend_calls("/responses"))
        raw = client.responses.with_raw_response.create(model="codex-or-spare", input="y")
        assert raw.headers["x-llmrelay-provider"] == "spare"
        assert len(codex.backend_calls("/responses")) == calls  # not asked at all
        with pytest.raises(openai.APIStatusError) as refused:
            client.responses.create(model="codex", input="z")
        assert refused.value.status_code == 503
        assert "retry-after" in refused.value.response.headers, refused.value.response.text
        retry_after = int(refused.value.response.headers["retry-after"])
        assert 3000 < retry_after <= 3600
        shown = admin.get(f"/providers/{provider_id(admin)}/codex").json()
        assert shown["exhausted_until"] is not None
    finally:
        codex.used_percent = 12.5


def test_console_device_flow_through_the_admin_api(
    codex: MockCodex, admin: httpx.Client, client: openai.OpenAI
) -> None:
    provider = provider_id(admin)
    started = admin.post(f"/providers/{provider}/codex/device")
    assert started.status_code == 200, started.text
    code = started.json()
    assert code["verification_url"] == f"{codex.issuer}/codex/device"
    poll = {"device_auth_id": code["device_auth_id"], "user_code": code["user_code"]}
    assert admin.post(f"/providers/{provider}/codex/device/poll", json=poll).status_code == 202
    codex.approve(code["user_code"])
    done = admin.post(f"/providers/{provider}/codex/device/poll", json=poll)
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "signed_in"
    assert done.json()["account"]["account_id"] == codex.account_id

    until(lambda: served(client, "console"), "the account signed in through the console served")


def test_logout_from_the_cli(
    signed_in: None, gateway: GatewayProcess, client: openai.OpenAI
) -> None:
    assert "signed out" in finished(cli(gateway, "logout", "--provider", "codex"))

    def refused() -> bool:
        try:
            client.responses.create(model="codex", input="gone")
        except openai.APIStatusError as error:
            return error.status_code == 503
        return False

    until(refused, "the signed-out account no longer served")


def test_the_cli_refuses_a_provider_of_another_type(gateway: GatewayProcess) -> None:
    process = cli(gateway, "login", "--provider", "spare", "--device")
    out, _ = process.communicate(timeout=CEILING_S)
    assert process.returncode == 1 and "not openai_codex" in out

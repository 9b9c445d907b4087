"""Mail, accounts, sign-up, preferences and alerts through a real `llmrelay serve` (SQLite, its
job runner in process) mailing a real SMTP server on loopback over STARTTLS with a sign-in:
an invitation followed from the mail to a signed-in account; a password reset that ends the
old session and works once; a sign-up that signs in only once its address is verified, then
gets exactly one low-balance alert; a tenant's fallback and default models serving requests
of the official openai SDK against a mock upstream whose model fails."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import httpx
import openai
import pytest

from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mail import token_in
from tests.support.mock_upstream import MockUpstream
from tests.support.smtp_sink import SmtpSink
from tests.support.tls import make_certificates

pytestmark = pytest.mark.e2e

ADMIN = "admin-token-for-accounts-e2e-0123456789"
KEY = "e2e-accounts-key-0123456789"
PASSWORD = "a long enough password"
CONSOLE = "https://console.example"
T = TypeVar("T")


@pytest.fixture(scope="module")
def sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmtpSink]:
    certificates = make_certificates(tmp_path_factory.mktemp("smtp-tls"))
    server = SmtpSink(certificates=certificates, credentials=("relay", "relay password")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(
    sink: SmtpSink, upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    assert sink.certificates is not None
    config = f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    timeout_s: 5
models:
  - name: good
    routes: [{{provider: up, upstream_model: echo}}]
  - name: failing
    routes: [{{provider: up, upstream_model: status-500}}]
projects:
  - name: main
    keys:
      - {{name: k1, key: {KEY}}}
"""
    env = {
        "LLMRELAY_ADMIN_TOKEN": ADMIN,
        "LLMRELAY_SMTP_URL": sink.url(),
        "LLMRELAY_SMTP_CA_FILE": str(sink.certificates.ca_file),
        "LLMRELAY_SMTP_STARTTLS": "required",
        "LLMRELAY_MAIL_FROM": "llmrelay <noreply@gateway.example>",
        "LLMRELAY_PUBLIC_URL": CONSOLE,
        "LLMRELAY_SIGNUP_ENABLED": "true",
        "LLMRELAY_SIGNUP_FREE_CREDIT_USD": "1",
        "LLMRELAY_JOBS_POLL_S": "0.2",
        "LLMRELAY_ALERTS_INTERVAL_S": "1",
    }
    yield from serving(tmp_path_factory.mktemp("accounts"), config, env=env)


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"{gateway.url}/api/admin", headers=headers) as client:
        yield client


def _default_tenant(admin: httpx.Client) -> str:
    """The tenant of the declarative config (other tests sign up tenants of their own)."""
    tenants = admin.get("/tenants", params={"limit": 500}).json()["data"]
    return str(next(t["id"] for t in tenants if t["slug"] == "default"))


def _client(gateway: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=f"{gateway.url}/api/admin")


def _sign_in(client: httpx.Client, email: str, password: str) -> httpx.Response:
    answer = client.post("/auth/login", json={"email": email, "password": password})
    if answer.status_code == 200:
        client.headers["X-CSRF-Token"] = answer.json()["csrf_token"]
    return answer


def _link_token(sink: SmtpSink, to: str, path: str, count: int = 1) -> str:
    mail = sink.wait_for(to, count)[-1]
    text = mail.text()
    assert f"{CONSOLE}{path}?token=" in text, text
    html = mail.html()
    assert html is not None and f"{CONSOLE}{path}?token=" in html
    assert mail.encrypted and mail.login == "relay"
    return token_in(text)


def _eventually(check: Callable[[], T | None], timeout_s: float = 10.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found is not None:
            return found
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.1)


def test_an_invitation_from_the_mail_to_a_signed_in_account(
    gateway: GatewayProcess, admin: httpx.Client, sink: SmtpSink
) -> None:
    tenant = _default_tenant(admin)
    invited = admin.post(
        "/invitations",
        json={"email": "ivy@example.com", "tenant_id": tenant, "role": "developer"},
    )
    assert invited.status_code == 201, invited.text
    assert invited.json()["pending"] is True
    token = _link_token(sink, "ivy@example.com", "/accept-invitation")
    [mail] = sink.messages_to("ivy@example.com")
    assert mail.subject == "You are invited to Default on llmrelay"
    with _client(gateway) as anonymous:
        assert _sign_in(anonymous, "ivy@example.com", PASSWORD).status_code == 401
        accepted = anonymous.post(
            "/auth/invitation/accept", json={"token": token, "password": PASSWORD}
        )
        assert accepted.status_code == 200, accepted.text
        signed_in = _sign_in(anonymous, "ivy@example.com", PASSWORD)
        assert signed_in.status_code == 200, signed_in.text
        me = anonymous.get("/auth/me").json()
        assert [m["role"] for m in me["memberships"]] == ["developer"]


def test_a_password_reset_ends_the_old_session_and_works_once(
    gateway: GatewayProcess, admin: httpx.Client, sink: SmtpSink
) -> None:
    made = admin.post("/users", json={"email": "rex@example.com", "password": PASSWORD})
    assert made.status_code == 201, made.text
    new_password = "another long password"
    with _client(gateway) as old, _client(gateway) as anonymous:
        assert _sign_in(old, "rex@example.com", PASSWORD).status_code == 200
        assert (
            anonymous.post("/auth/password-reset", json={"email": "rex@example.com"}).status_code
            == 202
        )
        nobody = anonymous.post("/auth/password-reset", json={"email": "nobody@example.com"})
        assert nobody.status_code == 202
        token = _link_token(sink, "rex@example.com", "/reset-password")

        # a second request: its link replaces the first, which expires besides
        assert (
            anonymous.post("/auth/password-reset", json={"email": "rex@example.com"}).status_code
            == 202
        )
        second = _link_token(sink, "rex@example.com", "/reset-password", count=2)
        first = {"token": token, "password": new_password}
        assert anonymous.post("/auth/password-reset/confirm", json=first).status_code == 400
        with sqlite3.connect(gateway.database_url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE account_tokens SET expires_at = '2000-01-01 00:00:00.000000'")
        expired = anonymous.post(
            "/auth/password-reset/confirm", json={"token": second, "password": new_password}
        )
        assert expired.status_code == 400, expired.text

        assert (
            anonymous.post("/auth/password-reset", json={"email": "rex@example.com"}).status_code
            == 202
        )
        third = _link_token(sink, "rex@example.com", "/reset-password", count=3)
        done = anonymous.post(
            "/auth/password-reset/confirm", json={"token": third, "password": new_password}
        )
        assert done.status_code == 200, done.text
        assert old.get("/auth/me").status_code == 401  # the session from before ended
        again = anonymous.post(
            "/auth/password-reset/confirm", json={"token": third, "password": PASSWORD}
        )
        assert again.status_code == 400
        assert _sign_in(anonymous, "rex@example.com", PASSWORD).status_code == 401
        assert _sign_in(anonymous, "rex@example.com", new_password).status_code == 200
    assert sink.messages_to("nobody@example.com") == []


def test_a_sign_up_verifies_signs_in_and_is_alerted_once(
    gateway: GatewayProcess, sink: SmtpSink
) -> None:
    with _client(gateway) as founder:
        made = founder.post(
            "/signup",
            json={"email": "sam@example.com", "password": PASSWORD, "tenant_name": "Sam's Lab"},
        )
        assert made.status_code == 201, made.text
        tenant = made.json()
        assert (tenant["slug"], tenant["balance_usd"], tenant["prepaid"]) == ("sam-s-lab", 1, True)
        refused = _sign_in(founder, "sam@example.com", PASSWORD)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "account_pending"
        token = _link_token(sink, "sam@example.com", "/verify-email")
        assert founder.post("/auth/verify-email", json={"token": token}).status_code == 200
        assert _sign_in(founder, "sam@example.com", PASSWORD).status_code == 200

        path = f"/tenants/{tenant['id']}/preferences"
        current = founder.get(path)
        changed = founder.put(
            path, json={"low_balance_usd": 5}, headers={"If-Match": current.headers["ETag"]}
        )
        assert changed.status_code == 200, changed.text
    alert = sink.wait_for("sam@example.com", count=2)[-1]  # the verification, then the alert
    assert alert.subject == "Sam's Lab: the prepaid balance is under $5.00"
    assert "$1.00" in alert.text()
    time.sleep(3)  # three more alert rounds (every second): still one alert
    assert len(sink.messages_to("sam@example.com")) == 2


def test_a_tenant_fallback_and_default_model_serve_requests(
    gateway: GatewayProcess,
    admin: httpx.Client,
    closing: Closing,
) -> None:
    client = closing(
        openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=10)
    )
    message = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="failing", messages=message)  # type: ignore[arg-type]
    assert failed.value.status_code == 502
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="default", messages=message)  # type: ignore[arg-type]

    tenant = _default_tenant(admin)
    changed = admin.put(
        f"/tenants/{tenant}/preferences",
        json={"fallback_model": "good", "default_model": "good"},
        headers={"If-Match": "*"},
    )
    assert changed.status_code == 200, changed.text

    def served(model: str) -> openai.types.chat.ChatCompletion | None:
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=model,
                messages=message,  # type: ignore[arg-type]
            )
        except openai.APIStatusError:
            return None  # the snapshot has not followed yet
        assert raw.headers["x-llmrelay-model"] == "good"
        return raw.parse()

    fallen_back = _eventually(lambda: served("failing"))
    assert fallen_back.model == "good"
    assert fallen_back.choices[0].message.content == "hello"
    by_default = _eventually(lambda: served("default"))
    assert by_default.model == "good"

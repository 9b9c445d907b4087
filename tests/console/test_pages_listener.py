"""The console behind the admin listener (LLMRELAY_ADMIN_LISTEN: its own port, where /v1 is
not served), with LLMRELAY_PUBLIC_API_URL naming the model API: the Playground streams from
the admin port's page to the data-plane port (CORS for the console's origin, and only for
it), the Quickstart's snippets name the data plane. No SMTP server here: an invitation by
mail says so, and the mail's job does not claim to have sent it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from llmrelay.app import create_app
from llmrelay.gateway.cors import DataPlaneCors
from llmrelay.gateway.entry import GatewayApp
from llmrelay.settings import Settings
from tests.console.conftest import ADMIN_TOKEN, KEY, PASSWORD, console_config, sign_in
from tests.support.accounts import make_account
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.ports import free_port


class Split:
    def __init__(self, gateway: GatewayProcess, admin_url: str) -> None:
        self.gateway = gateway
        self.admin_url = admin_url


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Split]:
    upstream = MockUpstream().start()
    admin_port = free_port()
    admin_url = f"http://127.0.0.1:{admin_port}"
    gateway = GatewayProcess(
        tmp_path_factory.mktemp("listener"),
        config=console_config(upstream),
        env={
            "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
            "LLMRELAY_ADMIN_LISTEN": f"127.0.0.1:{admin_port}",
            "LLMRELAY_PUBLIC_URL": admin_url,
            "LLMRELAY_JOBS_POLL_S": "0.2",
        },
    )
    gateway.env["LLMRELAY_PUBLIC_API_URL"] = gateway.url
    gateway.start(timeout_s=90)
    try:
        with httpx.Client(
            base_url=f"{admin_url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=60,
        ) as admin:
            body = {"email": "split@example.com", "password": PASSWORD, "platform_admin": True}
            assert make_account(admin, body).status_code == 201
        yield Split(gateway, admin_url)
    finally:
        code = gateway.stop()
        upstream.stop()
    assert code == 0, gateway.logs()


def _page(browser: Browser, split: Split) -> Page:
    context = browser.new_context(base_url=split.admin_url)
    context.set_default_timeout(10_000)
    page = context.new_page()
    sign_in(page, "split@example.com")
    return page


def test_the_playground_reaches_the_data_plane_from_the_admin_port(
    browser: Browser, split: Split
) -> None:
    page = _page(browser, split)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto("/playground")
    expect(page.locator("#api-address-unknown")).to_have_count(0)
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Load models").click()
    expect(page.locator("#pg-model option[value=chat]")).to_have_count(1)
    page.get_by_label("Model", exact=True).select_option("chat")
    page.get_by_label("Message").fill("across the origins")
    page.get_by_role("button", name="Send (streaming)").click()
    expect(page.locator("#pg-status")).to_contain_text("finished: stop")
    expect(page.locator("#pg-output")).to_have_text("across the origins")
    expect(page.locator("#pg-served")).to_contain_text("served by up")
    assert not errors, errors

    page.goto("/quickstart")
    code = page.locator("#first-python").inner_text()
    assert f"{split.gateway.url}/v1" in code and split.admin_url not in code
    page.context.close()


def test_cors_on_the_data_plane_is_for_the_consoles_origin_only(split: Split) -> None:
    url = f"{split.gateway.base_url}/chat/completions"
    asked = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    allowed = httpx.options(url, headers={"Origin": split.admin_url, **asked})
    assert allowed.status_code == 204
    assert allowed.headers["access-control-allow-origin"] == split.admin_url
    assert "authorization" in allowed.headers["access-control-allow-headers"]
    other = httpx.options(url, headers={"Origin": "https://evil.example", **asked})
    assert "access-control-allow-origin" not in other.headers
    answer = httpx.get(
        f"{split.gateway.base_url}/models",
        headers={"Authorization": f"Bearer {KEY}", "Origin": split.admin_url},
    )
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == split.admin_url
    assert "x-llmrelay-provider" in answer.headers["access-control-expose-headers"]
    plain = httpx.get(
        f"{split.gateway.base_url}/models", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert "access-control-allow-origin" not in plain.headers


def test_an_invitation_without_a_mail_server_says_so(browser: Browser, split: Split) -> None:
    page = _page(browser, split)
    page.goto("/users")
    page.get_by_label("Email").fill("no-mail@example.com")
    page.get_by_label("Role", exact=True).select_option("viewer")
    page.get_by_role("button", name="Invite").click()
    warning = page.locator("#invite-warning")
    expect(warning).to_contain_text("no mail server is configured")
    assert "on its way" not in page.content()
    expect(page.get_by_label("Create the account with a temporary password")).to_be_checked()
    with httpx.Client(
        base_url=f"{split.admin_url}/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    ) as admin:
        deadline = time.monotonic() + 20
        while True:
            jobs = admin.get("/jobs", params={"kind": "send_mail"}).json()["data"]
            if jobs and jobs[0]["status"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, jobs
            time.sleep(0.2)
    assert jobs[0]["status"] == "failed", jobs[0]
    assert "no SMTP server" in jobs[0]["error"]
    page.context.close()


def test_without_data_plane_origins_the_data_plane_is_not_wrapped() -> None:
    """With the feature off the model API's app is the GatewayApp itself: no CORS layer, not
    one more call per request; on, only the origins named (the console's by default)."""
    assert type(create_app(Settings())) is GatewayApp
    assert type(create_app(Settings(public_api_url="http://127.0.0.1:8080"))) is GatewayApp
    split = Settings(public_url="https://console.example", public_api_url="https://api.example")
    wrapped = create_app(split)
    assert isinstance(wrapped, DataPlaneCors)
    assert wrapped.origins == frozenset({b"https://console.example"})
    named = Settings(data_plane_cors_origins="https://a.example, https://b.example/")
    assert named.data_plane_origins == ("https://a.example", "https://b.example")

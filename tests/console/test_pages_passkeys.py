"""Passkeys in the console, in Chromium with a virtual authenticator (the DevTools protocol's
WebAuthn domain, through Playwright's CDP session): add one on the account page, sign in with
it alone, use it as the second step after the password, rename and delete it; each step is
in the audit log. The gateway's LLMRELAY_PUBLIC_URL and the browser both use `localhost`: a
passkey's relying party is a host name, never an IP address."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.console.conftest import ADMIN_TOKEN, PASSWORD, sign_in
from tests.support.accounts import make_account
from tests.support.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

EMAIL = "passkey-user@example.com"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path_factory.mktemp("console-passkeys"), env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    )
    process.env["LLMRELAY_PUBLIC_URL"] = f"http://localhost:{process.port}"
    process.start(timeout_s=300)  # a loaded machine (CI beside other runs) starts it slowly
    try:
        with httpx.Client(
            base_url=f"{process.url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=60,
        ) as admin:
            made = make_account(
                admin, {"email": EMAIL, "password": PASSWORD, "platform_admin": True}
            )
            assert made.status_code == 201, made.text
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.logs()


@pytest.fixture
def page(browser: Browser, gateway: GatewayProcess) -> Iterator[Page]:
    """A page at http://localhost:PORT with a virtual platform authenticator that holds
    discoverable credentials and verifies its user without asking."""
    context = browser.new_context(base_url=f"http://localhost:{gateway.port}")
    context.set_default_timeout(30_000)
    opened = context.new_page()
    cdp = context.new_cdp_session(opened)
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    errors: list[str] = []
    opened.on("pageerror", lambda e: errors.append(str(e)))
    yield opened
    context.close()
    assert not errors, errors


def _sign_out(page: Page) -> None:
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/sign-in")


def test_a_passkey_added_in_the_console_signs_in_alone_and_as_the_second_step(
    page: Page, gateway: GatewayProcess
) -> None:
    sign_in(page, EMAIL)
    page.goto("/account")
    assert page.locator("#passkeys").inner_text().count("No passkey yet") == 1
    page.get_by_label("Name of the new passkey").fill("virtual laptop")
    page.get_by_role("button", name="Add a passkey").click()
    page.get_by_text("passkey 'virtual laptop' added").wait_for()
    codes = page.locator("#recovery-codes").inner_text().split()
    assert len(codes) == 10  # the account's first second factor
    assert page.get_by_label("Name of passkey virtual laptop").input_value() == "virtual laptop"

    # password-less: the sign-in page's passkey button alone
    _sign_out(page)
    page.get_by_role("button", name="Use a passkey").click()
    page.wait_for_url("**/dashboard")

    # the password now needs its second step: the passkey
    _sign_out(page)
    page.get_by_label("Email").fill(EMAIL)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Two-factor code").wait_for()
    page.get_by_role("button", name="Use a passkey").click()
    page.wait_for_url("**/dashboard")

    # rename, then delete: the password alone signs in again
    page.goto("/account")
    page.get_by_label("Name of passkey virtual laptop").fill("old laptop")
    page.get_by_role("button", name="Rename").click()
    page.get_by_text("passkey renamed").wait_for()
    assert "never" not in page.locator("#passkeys").inner_text()  # last used: shown
    page.get_by_role("button", name="Delete passkey old laptop").click()
    page.get_by_text("passkey deleted").wait_for()
    assert "No passkey yet" in page.locator("#passkeys").inner_text()
    _sign_out(page)
    sign_in(page, EMAIL)

    with httpx.Client(
        base_url=f"{gateway.url}/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=60,
    ) as admin:
        rows = admin.get("/audit", params={"actor": EMAIL, "limit": 200}).json()["data"]
    seen = {(r["action"], r["status_code"]) for r in rows if r["actor_email"] == EMAIL}
    assert {
        ("user.passkey_register", 201),
        ("auth.passkey_login", 200),
        ("user.passkey_rename", 200),
        ("user.passkey_delete", 204),
    } <= seen, seen

"""Signing in through the console: password, then the TOTP step (the password never in the
page), recovery codes, the way back to the page asked for (never to another site), wrong
passwords, signing out, and two-factor set up from the account page."""

from __future__ import annotations

import re
import time

import pyotp
from playwright.sync_api import expect

from tests.console.conftest import PASSWORD, Site, sign_in
from tests.support.accounts import make_account


def _account(site: Site, email: str) -> None:
    with site.admin() as admin:
        body = {
            "email": email,
            "password": PASSWORD,
            "tenant_id": site.tenant_id,
            "role": "developer",
        }
        assert make_account(admin, body).status_code == 201


def test_two_factor_from_setup_to_sign_in(site: Site) -> None:
    email = "two-factor@example.com"
    _account(site, email)
    context = site.new_context()
    page = context.new_page()
    sign_in(page, email)
    page.goto("/account")
    page.get_by_role("button", name="Set up two-factor").click()
    secret = page.locator("#totp-secret").inner_text()
    totp = pyotp.TOTP(secret)
    page.get_by_label("Code from the app").fill(totp.now())
    page.get_by_role("button", name="Turn two-factor on").click()
    codes = page.locator("#recovery-codes").inner_text().split()
    assert len(codes) == 10
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/sign-in")

    # the password step leads to the code step, which holds the password only sealed
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Two-factor code")).to_be_visible()
    assert PASSWORD not in page.content()
    page.get_by_label("Authentication code").fill("000000")
    page.get_by_role("button", name="Verify").click()
    expect(page.get_by_role("alert")).to_contain_text("code")
    page.get_by_label("Authentication code").fill(totp.at(time.time() + 30))
    page.get_by_role("button", name="Verify").click()
    page.wait_for_url("**/dashboard")

    # a recovery code signs in once
    page.get_by_role("button", name="Sign out").click()
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_label("Or a recovery code").fill(codes[0])
    page.get_by_role("button", name="Verify").click()
    page.wait_for_url("**/dashboard")
    context.close()


def test_a_wrong_password_keeps_the_email_and_says_why(site: Site) -> None:
    context = site.new_context()
    page = context.new_page()
    site.account("viewer")
    page.goto("/sign-in")
    page.get_by_label("Email").fill("viewer@example.com")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("wrong email or password")
    expect(page.get_by_label("Email")).to_have_value("viewer@example.com")
    expect(page.get_by_label("Password")).to_have_value("")
    context.close()


def test_sign_in_returns_to_the_page_asked_for_and_only_to_this_site(site: Site) -> None:
    context = site.new_context()
    page = context.new_page()
    site.account("developer")
    page.goto("/keys?status=active")
    assert "/sign-in?next=" in page.url
    page.get_by_label("Email").fill("developer@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/keys?status=active")
    page.get_by_role("button", name="Sign out").click()
    page.goto("/sign-in?next=//evil.example/x")
    sign_in(page, "developer@example.com")  # lands on the dashboard, not elsewhere
    assert page.url.startswith(site.url)
    context.close()


def test_signing_out_ends_the_session(site: Site) -> None:
    context = site.new_context()
    page = context.new_page()
    sign_in(page, site.account("auditor"))
    session = next(c["value"] for c in context.cookies() if c["name"] == "llmrelay_session")
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/sign-in")
    answer = context.request.get(
        "/api/admin/auth/me", headers={"Cookie": f"llmrelay_session={session}"}
    )
    assert answer.status == 401
    page.goto("/dashboard")
    assert "/sign-in" in page.url
    context.close()


def test_after_sign_in_only_a_path_of_this_site() -> None:
    from llmrelay.console.pages.auth import _next

    assert _next("/keys?status=active") == "/keys?status=active"
    for hostile in (
        "//evil.example",
        "/\t/evil.example",
        "/\\evil.example",
        "https://evil.example",
        "/ok\n/x",
        "/dashboard\n",
        None,
        "",
    ):
        assert _next(hostile) == "/dashboard", hostile


def test_a_forgotten_password_is_reset_from_the_mailed_link(site: Site) -> None:
    email = "forgetful@example.com"
    _account(site, email)
    context = site.new_context()
    page = context.new_page()
    page.goto("/sign-in")
    page.get_by_role("link", name="Forgot your password?").click()
    page.get_by_label("Email").fill(email)
    page.get_by_role("button", name="Send the link").click()
    expect(page.get_by_role("status")).to_be_visible()  # the same words for any address
    (message,) = site.mail.wait_for(email)
    link = re.search(r"https?://\S+/reset-password\?token=[\w-]+", message.text())
    assert link is not None, message.text()
    page.goto(link.group())
    page.get_by_label("Password", exact=True).fill("a new password 1618")
    page.get_by_label("Password again").fill("a different one 1618")
    page.get_by_role("button", name="Set the new password").click()
    expect(page.locator(".field.invalid .note.error")).to_have_text("the two passwords differ")
    page.get_by_label("Password", exact=True).fill("a new password 1618")
    page.get_by_label("Password again").fill("a new password 1618")
    page.get_by_role("button", name="Set the new password").click()
    expect(page.get_by_role("status")).to_contain_text("Your password is changed")
    sign_in(page, email, "a new password 1618")
    context.close()

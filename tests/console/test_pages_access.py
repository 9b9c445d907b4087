"""Users and roles in the console: an invitation by mail whose link lets the invitee choose a
password and sign in; a temporary password (shown once) does the same without mail; a role
change applies on the user's next page; removal ends the user's access; an email that already
has an account becomes a member instead."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.console.conftest import PASSWORD, Site, sign_in
from tests.support.accounts import make_account


def test_invite_change_role_and_remove(site: Site) -> None:
    admin_page = site.signed_in("tenant_admin").new_page()
    admin_page.goto("/users")
    admin_page.get_by_label("Email").fill("invited@example.com")
    admin_page.get_by_label("Role", exact=True).select_option("viewer")
    admin_page.get_by_label("Create the account with a temporary password").check()
    admin_page.get_by_role("button", name="Invite").click()
    temporary = admin_page.locator("#temp-password").inner_text().strip()
    assert len(temporary) >= 20

    invitee = site.new_context()
    page = invitee.new_page()
    sign_in(page, "invited@example.com", temporary)
    # a temporary password: the user chooses its own first
    expect(page.get_by_role("heading", name="Choose your password")).to_be_visible()
    page.get_by_label("Current password").fill(temporary)
    page.get_by_label("New password", exact=True).fill(PASSWORD)
    page.get_by_label("New password again").fill(PASSWORD)
    page.get_by_role("button", name="Change password").click()
    page.wait_for_url("**/account")
    nav = page.get_by_role("navigation", name="Console")
    expect(nav.get_by_role("link", name="Keys", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Create key")).to_have_count(0)

    row = admin_page.locator("tbody tr", has_text="invited@example.com")
    row.get_by_label("Role of invited@example.com").select_option("auditor")
    row.get_by_role("button", name="Change").click()
    page.goto("/keys")
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    page.goto("/audit")
    expect(page.get_by_role("heading", name="Audit log")).to_be_visible()

    row = admin_page.locator("tbody tr", has_text="invited@example.com")
    row.locator("summary", has_text="Remove").click()
    row.get_by_role("button", name="Remove").click()
    page.goto("/audit")
    assert "/sign-in" in page.url  # removal ended the session
    invitee.close()
    admin_page.close()


def test_inviting_an_existing_account_adds_a_membership(site: Site) -> None:
    with site.admin() as admin:
        body = {"email": "floating@example.com", "password": PASSWORD}
        assert make_account(admin, body).status_code == 201
    page = site.signed_in("platform_admin").new_page()
    page.goto("/users")
    page.get_by_label("Email").fill("floating@example.com")
    page.get_by_label("Role", exact=True).select_option("developer")
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_role("status")).to_contain_text("already had an account: added")
    expect(page.locator("#temp-password")).to_have_count(0)
    other = site.new_context()
    mine = other.new_page()
    sign_in(mine, "floating@example.com")
    expect(mine.get_by_role("link", name="Playground")).to_be_visible()
    other.close()
    page.close()


def test_an_invitation_by_mail_leads_to_a_signed_in_user(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/users")
    page.get_by_label("Email").fill("mailed@example.com")
    page.get_by_label("Role", exact=True).select_option("developer")
    page.get_by_role("button", name="Invite").click()  # by mail: the default
    expect(page.get_by_role("status")).to_contain_text("on its way to mailed@example.com")
    (message,) = site.mail.wait_for("mailed@example.com")
    link = re.search(r"https?://\S+/accept-invitation\?token=[\w-]+", message.text())
    assert link is not None, message.text()
    assert link.group().startswith(site.url)

    invitee = site.new_context()
    mine = invitee.new_page()
    mine.goto(link.group())
    mine.get_by_label("Your name").fill("Mailed Person")
    mine.get_by_label("Password", exact=True).fill("chosen password 3141")
    mine.get_by_label("Password again").fill("chosen password 3141")
    mine.get_by_role("button", name="Activate my account").click()
    expect(mine.get_by_role("status")).to_contain_text("Your account is ready")
    sign_in(mine, "mailed@example.com", "chosen password 3141")
    expect(mine.get_by_role("link", name="Playground")).to_be_visible()
    mine.goto(link.group())  # a link works once
    mine.get_by_label("Password", exact=True).fill("another password 2718")
    mine.get_by_label("Password again").fill("another password 2718")
    mine.get_by_role("button", name="Activate my account").click()
    expect(mine.get_by_role("alert")).to_be_visible()
    invitee.close()
    page.close()

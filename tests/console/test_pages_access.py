"""Users and roles in the console: an invitation's temporary password (shown once) signs the
new user in with the role given; a role change applies on the user's next page; removal ends
the user's access; an email that already has an account becomes a member instead."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import PASSWORD, Site, sign_in


def test_invite_change_role_and_remove(site: Site) -> None:
    admin_page = site.signed_in("tenant_admin").new_page()
    admin_page.goto("/users")
    admin_page.get_by_label("Email").fill("invited@example.com")
    admin_page.get_by_label("Role", exact=True).select_option("viewer")
    admin_page.get_by_role("button", name="Invite").click()
    temporary = admin_page.locator("#temp-password").inner_text().strip()
    assert len(temporary) >= 20

    invitee = site.new_context()
    page = invitee.new_page()
    sign_in(page, "invited@example.com", temporary)
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
    row.get_by_role("button", name="Remove").click()
    page.goto("/audit")
    assert "/sign-in" in page.url  # removal ended the session
    invitee.close()
    admin_page.close()


def test_inviting_an_existing_account_adds_a_membership(site: Site) -> None:
    with site.admin() as admin:
        body = {"email": "floating@example.com", "password": PASSWORD}
        assert admin.post("/users", json=body).status_code == 201
    page = site.signed_in("platform_admin").new_page()
    page.goto("/users")
    page.get_by_label("Email").fill("floating@example.com")
    page.get_by_label("Role", exact=True).select_option("developer")
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_role("status")).to_contain_text("added as a member")
    expect(page.locator("#temp-password")).to_have_count(0)
    other = site.new_context()
    mine = other.new_page()
    sign_in(mine, "floating@example.com")
    expect(mine.get_by_role("link", name="Playground")).to_be_visible()
    other.close()
    page.close()

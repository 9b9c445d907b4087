"""A password an admin set is temporary: the console shows the change form on every page
until the user chooses its own, then everything opens (docs/accounts.md)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import Site, sign_in

TEMPORARY = "temporary password 5150"
CHOSEN = "a passphrase of my own 6262"


def test_a_temporary_password_is_changed_before_anything_else(site: Site) -> None:
    email = "temporary@example.com"
    with site.admin() as admin:
        body = {
            "email": email,
            "password": TEMPORARY,
            "tenant_id": site.tenant_id,
            "role": "developer",
        }
        assert admin.post("/users", json=body).status_code == 201
    context = site.new_context()
    page = context.new_page()
    sign_in(page, email, TEMPORARY)
    expect(page.get_by_role("heading", name="Choose your password")).to_be_visible()
    page.goto("/projects")
    expect(page.get_by_role("heading", name="Choose your password")).to_be_visible()

    # a mismatch and a wrong current password keep the form
    page.get_by_label("Current password").fill(TEMPORARY)
    page.get_by_label("New password", exact=True).fill(CHOSEN)
    page.get_by_label("New password again").fill("something else entirely")
    page.get_by_role("button", name="Change password").click()
    expect(page.get_by_role("heading", name="Choose your password")).to_be_visible()

    page.get_by_label("Current password").fill(TEMPORARY)
    page.get_by_label("New password", exact=True).fill(CHOSEN)
    page.get_by_label("New password again").fill(CHOSEN)
    page.get_by_role("button", name="Change password").click()
    page.wait_for_url("**/account")
    expect(page.get_by_role("status").first).to_contain_text("password changed")
    page.goto("/projects")
    expect(page.get_by_role("heading", name="Choose your password")).to_have_count(0)
    expect(page.get_by_role("heading", name="Projects", exact=True)).to_be_visible()
    context.close()

"""A provider's resources (accounts) on its console page: added with a key that is never
shown again, listed with their priority, quota and health, disabled and enabled again,
removed."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import Site

SECRET = "sk-account-made-in-the-console-5e2b"


def test_resources_are_listed_added_disabled_and_removed(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/providers")
    page.get_by_label("Slug").fill("pooled-console")
    page.get_by_label("Type").select_option("openai_compatible")
    page.get_by_label("Base URL").first.fill(site.upstream.base_url)
    page.get_by_role("button", name="Add provider").click()
    expect(page.get_by_role("heading", name="pooled-console")).to_be_visible()
    provider_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    section = page.locator("#resources")
    expect(section).to_contain_text("None: the provider's own key is its one account.")

    form = page.locator("#add-resource")
    form.get_by_label("Name").fill("account-a")
    form.get_by_label("API key").fill(SECRET)
    form.get_by_label("Priority").fill("1")
    form.get_by_label("Requests per minute").fill("60")
    form.get_by_role("button", name="Add resource").click()
    row = page.locator("tr[data-resource='account-a']")
    expect(row).to_contain_text(f"…{SECRET[-4:]}")
    expect(row).to_contain_text("60 rpm")
    expect(row.locator(".resource-health .badge")).to_have_text("closed")
    assert SECRET not in page.content()  # write-only

    row.get_by_role("button", name="Disable").click()
    row = page.locator("tr[data-resource='account-a']")
    expect(row.locator(".resource-health .badge")).to_have_text("disabled")
    row.get_by_role("button", name="Enable").click()
    row = page.locator("tr[data-resource='account-a']")
    expect(row.locator(".resource-health .badge")).to_have_text("closed")

    # a name the API refuses is named on the page
    form = page.locator("#add-resource")
    form.get_by_label("Name").fill("account-a")
    form.get_by_role("button", name="Add resource").click()
    expect(page.locator("body")).to_contain_text("account-a")
    expect(page.locator("tr[data-resource='account-a']")).to_have_count(1)
    page.close()

    with site.admin() as admin:
        listed = admin.get(f"/providers/{provider_id}/resources").json()["data"]
    assert [(r["name"], r["priority"], r["rpm"], r["disabled"]) for r in listed] == [
        ("account-a", 1, 60, False)
    ]

"""Forms work without JavaScript (POST, then redirect; errors next to the field with the
input kept), shown here with projects in a browser that runs no script at all."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import PASSWORD, Site


def test_a_project_is_created_without_javascript(site: Site) -> None:
    context = site.new_context(javascript=False)
    page = context.new_page()
    page.goto("/sign-in")
    page.get_by_label("Email").fill(site.account("tenant_admin"))
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/dashboard")

    page.goto("/projects")
    page.get_by_label("Name").fill("no-script")
    page.get_by_label("Requests a minute").fill("120")
    page.get_by_label("Monthly budget (USD)").fill("25.50")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("heading", name="no-script")).to_be_visible()
    expect(page.get_by_label("Requests a minute")).to_have_value("120")
    with site.admin() as admin:
        made = admin.get("/projects", params={"name": "no-script"}).json()["data"][0]
    assert made["limits"]["rpm"] == 120
    assert made["monthly_budget_micros"] == 25_500_000

    # the same name again: the admin API's conflict, the input kept
    page.goto("/projects")
    page.get_by_label("Name").fill("no-script")
    page.get_by_label("Tokens a minute").fill("5000")
    page.get_by_role("button", name="Create project").click()
    name = page.locator(".field.invalid")
    expect(name.locator(".note.error")).to_contain_text("a project named 'no-script' exists")
    expect(name.get_by_label("Name")).to_have_value("no-script")
    expect(page.get_by_label("Tokens a minute")).to_have_value("5000")

    # a limit below 1, shown next to its field
    page.get_by_label("Name").fill("no-script-2")
    page.get_by_label("Concurrent requests").fill("0")
    page.get_by_role("button", name="Create project").click()
    invalid = page.locator(".field.invalid")
    expect(invalid.get_by_label("Concurrent requests")).to_have_value("0")
    expect(invalid.locator(".note.error")).to_have_text("must be 1 or more")

    # a stale change (another admin saved first) is refused, not applied over theirs
    page.goto(f"/projects/{made['id']}")
    with site.admin() as admin:
        changed = admin.patch(
            f"/projects/{made['id']}",
            json={"models": ["chat"]},
            headers={"If-Match": f'"{made["version"]}"'},
        )
        assert changed.status_code == 200, changed.text
    page.get_by_label("Model allowlist").fill("story")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("version")
    context.close()

"""The account page lists the user's sessions and ends one, or all the others."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.console.conftest import PASSWORD, Site, sign_in
from tests.support.accounts import make_account


def test_the_account_page_ends_another_session(site: Site) -> None:
    email = "sessions@example.com"
    with site.admin() as admin:
        body = {"email": email, "password": PASSWORD, "tenant_id": site.tenant_id, "role": "viewer"}
        assert make_account(admin, body).status_code == 201
    contexts = [site.new_context() for _ in range(3)]
    try:
        pages = [context.new_page() for context in contexts]
        for page in pages:
            sign_in(page, email)
        here, other, third = pages
        here.goto("/account")
        rows = here.locator("#sessions tbody tr")
        expect(rows).to_have_count(3)
        expect(rows.filter(has_text="this session")).to_have_count(1)
        rows.filter(has=here.get_by_role("button", name="End")).first.get_by_role(
            "button", name="End"
        ).click()
        expect(here.get_by_role("status").first).to_contain_text("session ended")
        expect(here.locator("#sessions tbody tr")).to_have_count(2)
        ended = [p for p in (other, third) if _signed_out(p)]
        assert len(ended) == 1
        here.get_by_role("button", name="End all other sessions").click()
        expect(here.get_by_role("status").first).to_contain_text("1 other session(s) ended")
        expect(here.locator("#sessions tbody tr")).to_have_count(1)
        assert _signed_out(other) and _signed_out(third)
    finally:
        for context in contexts:
            context.close()


def _signed_out(page: Page) -> bool:
    page.goto("/account")
    return "/sign-in" in page.url

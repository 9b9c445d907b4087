"""Billing in the console: the wallet and its ledger as the admin API keeps them, the prepaid
and auto top-up settings saved with the wallet's ETag, and a top-up refused in the admin
API's words when no Stripe account is configured."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import Site


def test_the_wallet_its_ledger_and_its_settings(site: Site) -> None:
    with site.admin() as admin:
        credit = {"amount_usd": "12.5", "reason": "welcome credit", "adjustment_id": "console-1"}
        made = admin.post(f"/billing/{site.tenant_id}/adjustments", json=credit)
        assert made.status_code == 201, made.text
    page = site.signed_in("billing").new_page()
    page.goto("/billing")
    expect(page.locator("#balance")).to_have_text("$12.500000")
    expect(page.locator("#ledger tbody tr").first).to_contain_text("$12.500000")

    # automatic top-ups need Stripe: the admin API says so next to the box, input kept
    page.get_by_label("Auto top-up with the saved card").check()
    page.get_by_label("Top up below (USD)").fill("2")
    page.get_by_label("Top up by (USD)").fill("20")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".field.check.invalid + .note.error")).to_contain_text("Stripe")
    expect(page.get_by_label("Auto top-up with the saved card")).to_be_checked()
    expect(page.get_by_label("Top up by (USD)")).to_have_value("20")

    page.get_by_label("Auto top-up with the saved card").uncheck()
    page.get_by_label("Prepaid: reserve before each request").check()
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".card", has_text="Balance")).to_contain_text("prepaid: requests need it")
    with site.admin() as admin:
        wallet = admin.get(f"/billing/{site.tenant_id}/wallet").json()
    assert wallet["prepaid"] is True

    page.get_by_label("Amount (USD)").fill("10")
    page.get_by_role("button", name="Top up", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("Stripe")
    page.close()


def test_billing_is_read_only_for_a_viewer(site: Site) -> None:
    page = site.signed_in("viewer").new_page()
    page.goto("/billing")
    expect(page.get_by_role("heading", name="Billing")).to_be_visible()
    expect(page.get_by_role("button", name="Save settings")).to_have_count(0)
    expect(page.get_by_role("button", name="Top up", exact=True)).to_have_count(0)
    page.close()

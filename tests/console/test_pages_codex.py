"""An openai_codex provider's page in the console: the device code sign-in (the code shown,
"not approved yet" until the user approves at the stand-in issuer, then the account), its
usage limits read now, and signing out."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import Site


def test_a_chatgpt_account_signed_in_from_the_provider_page(site: Site) -> None:
    with site.admin() as admin:
        made = admin.post(
            "/providers",
            params={"tenant_id": site.tenant_id},
            json={"slug": "codex", "type": "openai_codex", "base_url": site.codex.backend},
            timeout=60,  # a loaded machine: the first write builds what it needs
        )
        assert made.status_code == 201, made.text
    provider_id = made.json()["id"]
    page = site.signed_in("tenant_admin").new_page()
    page.goto(f"/providers/{provider_id}")
    account = page.locator("#codex-account")
    expect(account).to_contain_text("No account is signed in")

    page.get_by_role("button", name="Sign in with a device code").click()
    device = page.locator("#codex-device")
    expect(device).to_contain_text(f"{site.codex.issuer}/codex/device")
    code = device.locator("strong code").inner_text()
    page.get_by_role("button", name="I approved it: finish signing in").click()
    expect(page.locator("#codex-device")).to_contain_text("Not approved yet")

    site.codex.approve(code)
    page.get_by_role("button", name="I approved it: finish signing in").click()
    expect(account).to_contain_text(f"{site.codex.email} ({site.codex.plan_type})")

    page.get_by_role("link", name="Read the usage limits now").click()
    expect(account).to_contain_text(f"{site.codex.used_percent:g} % used of 300 min")
    expect(account).to_contain_text("Secondary window")

    page.get_by_role("button", name="Sign the account out").click()
    expect(account).to_contain_text("No account is signed in")
    page.close()

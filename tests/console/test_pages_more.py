"""The pages for what the admin API had and the console lacked (issue 33), each driven in
Chromium against a real gateway: guardrail policies, their dry run and hits; routing policies
and the gateway-wide settings; sign-up and tenant preferences; refunds and adjustments;
webhook secrets and deliveries; pending invitations (resend, revoke) and the mail outbox; the
two-factor QR code; spend against budgets; the dashboard's top lists; search, sort and pages;
discovered models offered for a route."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from tests.console.conftest import KEY, Site, Watched, sign_in
from tests.support.accounts import make_account


def _chat(site: Site, text: str) -> httpx.Response:
    return httpx.post(
        f"{site.gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "chat", "messages": [{"role": "user", "content": text}]},
    )


def test_a_guardrail_policy_from_form_to_hit(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/guardrails")
    page.get_by_label("Name", exact=True).fill("no-emails")
    page.locator("#f-rules-0-detector").fill("email")
    page.locator("#f-rules-0-action").select_option("mask")
    page.locator("#f-rules-1-detector").fill("regex")  # a regex rule with no name: refused
    page.locator("#f-rules-1-pattern").fill("TICKET-[0-9]+")
    page.get_by_role("button", name="Create policy").click()
    expect(page.locator(".field.invalid")).to_have_count(1)
    expect(page.locator("#f-rules-1-pattern")).to_have_value("TICKET-[0-9]+")  # kept
    page.locator("#f-rules-1-name").fill("ticket")
    page.get_by_role("button", name="Create policy").click()
    expect(page.get_by_role("heading", name="no-emails")).to_be_visible()
    expect(page.locator("#rules tbody tr")).to_have_count(2)

    page.get_by_label("Text").fill("mail me at ann@example.com about TICKET-42")
    page.get_by_role("button", name="Try the rules").click()
    expect(page.locator("#dry-run")).to_contain_text("2 match(es)")
    expect(page.locator("#dry-run-masked")).to_contain_text("[EMAIL]")

    with site.admin() as admin:
        project = admin.get("/projects", params={"name": "main"}).json()["data"][0]
    page.goto(f"/projects/{project['id']}")  # bound to the project: requests are screened
    page.get_by_label("Guardrail policies").fill("no-emails")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".facts")).to_contain_text("no-emails")
    site.key_answers(KEY, 200)
    answer = _chat(site, "reach ann@example.com")
    for _ in range(100):  # the snapshot with the binding reaches the data plane
        if answer.json()["choices"][0]["message"]["content"] != "reach ann@example.com":
            break
        answer = _chat(site, "reach ann@example.com")
    site.gateway.records([answer.headers["x-request-id"]])
    page.goto("/guardrails")
    expect(page.locator("#hits tbody tr").first).to_contain_text("no-emails")
    assert "ann@example.com" not in page.locator("#hits").inner_text()  # never the match
    page.goto(f"/projects/{project['id']}")
    page.get_by_label("Guardrail policies").fill("")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".facts")).to_contain_text("none of its own")
    page.close()


def test_routing_policies_and_settings(site: Site) -> None:
    page = site.signed_in("platform_admin").new_page()
    page.goto("/routing")
    page.get_by_label("Name", exact=True).fill("only-up")
    page.get_by_label("Providers").fill("up")
    page.get_by_label("Strategy").select_option("weighted")
    page.get_by_role("button", name="Create policy").click()
    expect(page.get_by_role("heading", name="only-up")).to_be_visible()
    expect(page.locator(".facts")).to_contain_text("weighted")

    page.goto("/routing")
    settings = page.locator("#routing-settings")
    settings.get_by_label("Breaker: failures to open").fill("0")
    settings.get_by_role("button", name="Save routing settings").click()
    expect(page.locator("#routing-settings .field.invalid")).to_contain_text("must be 1 or more")
    page.locator("#routing-settings").get_by_label("Breaker: failures to open").fill("4")
    page.locator("#routing-settings").get_by_label("Global policy").select_option("only-up")
    page.locator("#routing-settings").get_by_role("button", name="Save routing settings").click()
    expect(page.get_by_role("status")).to_contain_text("Routing settings saved")
    expect(page.locator("#policies tr", has_text="only-up")).to_contain_text("global")
    with site.admin() as admin:
        stored = admin.get("/settings/routing")
        assert stored.json()["breaker"]["failures"] == 4
        admin.put(
            "/settings/routing",
            json={"breaker": stored.json()["breaker"]},
            headers={"If-Match": stored.headers["etag"]},
        )
    page.close()


def test_signup_settings_and_tenant_preferences(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/settings")
    expect(page.locator("#signup-settings")).to_contain_text("closed")
    form = page.locator(f"#preferences-{site.tenant_id}")
    form.get_by_label("Default model").select_option("chat")
    form.get_by_label("Low-balance alert below (USD)").fill("lots")
    form.get_by_role("button", name="Save preferences").click()
    invalid = page.locator(f"#preferences-{site.tenant_id} .field.invalid")
    expect(invalid).to_contain_text("must be a number")
    form = page.locator(f"#preferences-{site.tenant_id}")
    form.get_by_label("Low-balance alert below (USD)").fill("5")
    form.get_by_role("button", name="Save preferences").click()
    expect(page.get_by_role("status")).to_contain_text("Preferences saved")
    with site.admin() as admin:
        prefs = admin.get(f"/tenants/{site.tenant_id}/preferences").json()
    assert (prefs["default_model"], prefs["low_balance_usd"]) == ("chat", 5)
    page.close()


def test_refunds_adjustments_and_reconciliation(site: Site) -> None:
    page = site.signed_in("platform_admin").new_page()
    page.goto(f"/billing/adjustments?tenant_id={site.tenant_id}")
    adjust = page.locator("#adjustment-form")
    adjust.get_by_label("Amount (USD, signed)").fill("20")
    adjust.get_by_label("Reason").fill("welcome credit")
    adjust.get_by_role("button", name="Adjust the balance").click()
    expect(page.get_by_role("status")).to_contain_text("Adjustment of $20.000000 applied")
    page.reload()  # a reload posts nothing: the balance moved once
    expect(page.locator("#balance")).to_have_text("$20.000000")
    refund = page.locator("#refund-form")
    refund.get_by_label("Amount (USD)").fill("2.5")
    refund.get_by_label("Reason", exact=True).fill("goodwill")
    refund.get_by_role("button", name="Refund").click()
    expect(page.locator("#balance")).to_have_text("$22.500000")
    expect(page.locator("#reservations")).to_contain_text("No reservation metering failed")
    page.close()


def test_webhook_secret_and_deliveries(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/webhooks")
    page.get_by_role("button", name="Show the secret").click()
    first = page.locator("#webhook-secret").inner_text().strip()
    assert first.startswith("whsec_")
    page.reload()
    expect(page.locator("#webhook-secret")).to_have_count(0)  # shown when asked, once
    page.locator("summary", has_text="Rotate the secret").click()
    page.get_by_role("button", name="Rotate the secret").click()
    rotated = page.locator("#webhook-secret").inner_text().strip()
    assert rotated.startswith("whsec_") and rotated != first
    expect(page.locator("#deliveries")).to_contain_text("No delivery yet")
    page.close()


def test_pending_invitations_and_the_outbox(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/users")
    page.get_by_label("Email").fill("pending-one@example.com")
    page.get_by_label("Role", exact=True).select_option("viewer")
    page.get_by_role("button", name="Invite").click()
    row = page.locator("#invitations tr", has_text="pending-one@example.com")
    expect(row).to_contain_text("viewer")
    first = site.mail.wait_for("pending-one@example.com")[0].text()
    row.get_by_role("button", name="Send a new link").click()
    expect(page.get_by_role("status")).to_contain_text("A new link is on its way")
    messages = site.mail.wait_for("pending-one@example.com", count=2)
    assert re.search(r"token=[\w-]+", messages[-1].text()) != re.search(r"token=[\w-]+", first)
    page.goto("/mail")
    expect(page.locator("#outbox tr", has_text="pending-one@example.com")).to_have_count(2)
    page.goto("/users")
    row = page.locator("#invitations tr", has_text="pending-one@example.com")
    row.locator("summary", has_text="Revoke").click()
    row.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_contain_text("revoked")
    expect(page.locator("#invitations tr", has_text="pending-one@example.com")).to_have_count(0)
    page.close()


def test_the_two_factor_qr_code_is_drawn_here(site: Site) -> None:
    context = site.new_context()
    page = context.new_page()
    email = "qr-person@example.com"
    with site.admin() as admin:
        body = {
            "email": email,
            "password": "console password 4821",
            "tenant_id": site.tenant_id,
            "role": "viewer",
        }
        assert make_account(admin, body).status_code == 201
    sign_in(page, email)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto("/account")
    page.get_by_role("button", name="Set up two-factor").click()
    qr = page.locator("svg.qr")
    expect(qr).to_be_visible()
    assert qr.locator("path").count() >= 1
    link = page.locator("#otpauth-link").get_attribute("href") or ""
    assert link.startswith("otpauth://totp/")
    assert all(u.startswith(site.url) for u in requests)  # nothing fetched from elsewhere
    context.close()


def test_spend_tops_search_and_discovered_models(site: Site) -> None:
    answered = _chat(site, "spend some tokens on this " * 5)
    assert answered.status_code == 200, answered.text
    site.gateway.records([answered.headers["x-request-id"]])
    with site.admin() as admin:
        key = next(k for k in admin.get("/keys").json()["data"] if k["name"] == "fixed")
        limited = admin.patch(
            f"/keys/{key['id']}",
            json={"monthly_budget_usd": 0.01},
            headers={"If-Match": f'"{key["version"]}"'},
        )
        assert limited.status_code == 200, limited.text
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/spend")
    row = page.locator("#spend-key tr", has_text="fixed")
    expect(row.get_by_role("meter")).to_be_visible()
    assert float(row.get_by_role("meter").get_attribute("aria-valuenow") or 0) > 0

    page.goto(f"/keys/{key['id']}")  # and on the key's own page
    expect(page.locator("#month-spend").get_by_role("meter")).to_be_visible()

    page.goto("/dashboard")
    expect(page.locator("#top-models")).to_contain_text("chat")
    expect(page.locator("#top-keys")).to_contain_text("fixed")

    page.goto("/keys")
    page.get_by_label("Search keys").fill("captured")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#keys tbody tr")).to_have_count(1)
    expect(page.locator("#keys tbody tr")).to_contain_text("captured")
    page.goto("/keys?sort=-name")
    names = page.locator("#keys tbody tr td:first-child").all_text_contents()
    assert names == sorted(names, reverse=True)

    with site.admin() as admin:
        provider = next(p for p in admin.get("/providers").json()["data"] if p["slug"] == "up")
        stored = admin.put(
            f"/providers/{provider['id']}/models",
            json={"models": ["gpt-found-1", "gpt-found-2"]},
            headers={"If-Match": f'"{provider["version"]}"'},
        )
        assert stored.status_code == 200, stored.text
        model = admin.get("/models", params={"name": "chat"}).json()["data"][0]
    page.goto(f"/models/{model['id']}")
    offered = page.locator("#upstream-models option").evaluate_all("os => os.map(o => o.value)")
    assert {"gpt-found-1", "gpt-found-2"} <= set(offered)
    assert page.get_by_label("Upstream model").get_attribute("list") == "upstream-models"
    page.close()


#: Every page of the navigation and the new pages' details, for the themes and the phone.
EVERY_PAGE = (
    "/dashboard",
    "/activity",
    "/usage",
    "/spend",
    "/quickstart",
    "/playground",
    "/keys",
    "/projects",
    "/catalogue",
    "/models",
    "/providers",
    "/routing",
    "/guardrails",
    "/billing",
    "/billing/adjustments",
    "/users",
    "/tenants",
    "/settings",
    "/webhooks",
    "/mail",
    "/jobs",
    "/audit",
    "/account",
)


def test_every_page_dark_and_at_phone_width(site: Site) -> None:
    """Each page in the dark theme (the dark palette applied, no console error) and at 390
    px (nothing wider than the screen but a table inside its own box)."""
    signed_in = site.signed_in("platform_admin").storage_state()
    wrong: list[str] = []
    for options in ({"color_scheme": "dark"}, {"viewport": {"width": 390, "height": 844}}):
        context = site.browser.new_context(
            base_url=site.url,
            storage_state=signed_in,
            **options,
        )
        page = context.new_page()
        watched = Watched(page)
        for path in EVERY_PAGE:
            answer = page.goto(path)
            if answer is None or answer.status != 200:
                wrong.append(f"{options} {path}: {answer.status if answer else None}")
                continue
            if "color_scheme" in options:
                background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
                if background != "rgb(17, 19, 24)":
                    wrong.append(f"dark {path}: background {background}")
            else:
                width = page.evaluate("() => document.documentElement.scrollWidth")
                if width > 390:
                    wrong.append(f"390 px {path}: {width} px wide")
        wrong.extend(f"{options}: {e}" for e in watched.errors)
        context.close()
    assert not wrong, "\n".join(wrong)

"""Providers in the console: added with a credential that is never shown again, a
connection test, model discovery as a job whose status the page follows, health on the
dashboard, and a route's breaker state changing on the models page while it is open."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from tests.console.conftest import KEY, Site

SECRET = "sk-upstream-made-in-the-console-7c1d"


def test_a_provider_from_form_to_discovered_models(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/providers")
    page.get_by_label("Slug").fill("console-up")
    page.get_by_label("Type").select_option("openai_compatible")
    page.get_by_label("Base URL").first.fill(site.upstream.base_url)
    page.get_by_label("API key").fill(SECRET)
    page.get_by_role("button", name="Add provider").click()
    expect(page.get_by_role("heading", name="console-up")).to_be_visible()
    expect(page.locator(".facts")).to_contain_text(f"key ending …{SECRET[-4:]}")
    assert SECRET not in page.content()  # write-only

    page.get_by_role("button", name="Test connection").click()
    result = page.locator("#test-result")
    expect(result).to_contain_text("online")
    expect(result).to_contain_text("models listed")

    page.get_by_role("button", name="Discover models").click()
    expect(page.locator("#discovery-job .job-status")).to_have_text("succeeded", timeout=20_000)
    page.reload()
    expect(page.locator(".chips li").first).to_be_visible()
    assert "empty" not in page.locator(".chips").inner_text()

    page.goto("/dashboard")
    expect(page.locator("#provider-health")).to_contain_text("console-up")
    page.close()


def test_a_breaker_opening_shows_on_the_open_models_page(site: Site) -> None:
    page = site.signed_in("viewer").new_page()
    page.goto("/models")
    # A route whose upstream model is gone (the provider's 404 opens its breaker at once). Not a
    # refused credential: that queues a health probe, which finds the provider itself online
    # and closes its routes' breakers (gateway/trials.py) before the page may poll.
    row = page.locator("tbody tr", has_text="vanished")
    expect(row.locator("[data-breaker] .badge")).to_have_text("closed")
    answer = httpx.post(
        f"{site.gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "vanished", "messages": [{"role": "user", "content": "x"}]},
    )
    assert answer.status_code == 502, answer.text
    # the page polls the breaker states (every 5 s): no reload
    expect(row.locator("[data-breaker] .badge")).to_have_text("open", timeout=15_000)
    page.close()


def test_jobs_are_listed_with_their_status(site: Site) -> None:
    with site.admin() as admin:
        provider = next(p for p in admin.get("/providers").json()["data"] if p["slug"] == "up")
        job_id = admin.post(f"/providers/{provider['id']}/discover").json()["job_id"]
        kind = admin.get(f"/jobs/{job_id}").json()["kind"]
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/jobs")
    page.get_by_label("Kind").fill(kind)
    page.get_by_role("button", name="Filter").click()
    row = page.locator("tbody tr", has_text=kind).first
    expect(row).to_be_visible()
    for _ in range(50):  # until the in-process runner has run it (it is fast)
        if "succeeded" in row.inner_text():
            break
        page.reload()
    expect(row.locator(".badge")).to_have_text("succeeded")
    page.close()


def test_a_provider_the_outbound_policy_refuses_is_named_in_the_form(site: Site) -> None:
    """A tenant admin's provider at cloud metadata, or at a loopback address the operator did
    not open (the site opens 127.0.0.1 only): refused with the rule next to the field."""
    page = site.signed_in("tenant_admin").new_page()
    for slug, base_url, rule in [
        ("console-md", "http://169.254.169.254/latest", "is a cloud metadata address"),
        ("console-loop", "http://127.0.0.2:9/v1", "is a loopback address"),
    ]:
        page.goto("/providers")
        page.get_by_label("Slug").fill(slug)
        page.get_by_label("Type").select_option("openai_compatible")
        page.get_by_label("Base URL").first.fill(base_url)
        page.get_by_role("button", name="Add provider").click()
        expect(page.locator("main")).to_contain_text(rule)
        expect(page.locator("main")).to_contain_text("LLMRELAY_TENANT_OUTBOUND_ALLOW")
        expect(page.get_by_role("heading", name=slug)).to_have_count(0)
    page.close()

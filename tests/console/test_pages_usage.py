"""Usage analytics in the console: the figures of real requests, grouped, against the
previous period, a bad filter answered with the admin API's words, and the CSV export."""

from __future__ import annotations

import csv
import io

import httpx
from playwright.sync_api import expect

from tests.console.conftest import KEY, Site


def _requests(site: Site, n: int) -> None:
    ids = []
    for i in range(n):
        answer = httpx.post(
            f"{site.gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json={"model": "chat", "messages": [{"role": "user", "content": f"usage {i}"}]},
        )
        assert answer.status_code == 200
        ids.append(answer.headers["x-request-id"])
    assert len(site.gateway.records(ids)) == n


def test_usage_grouped_by_model_and_its_csv(site: Site) -> None:
    context = site.signed_in("billing")
    page = context.new_page()
    # What the module's other tests sent before this one (the suite may run in any order).
    answer = context.request.get("/usage.csv?group_by=model")
    assert answer.status == 200, answer.text()
    before = sum(int(r["requests"]) for r in csv.DictReader(io.StringIO(answer.text())))
    _requests(site, 3)
    page.goto("/usage")
    page.get_by_label("Group by").select_option("model")
    page.get_by_role("button", name="Apply").click()
    row = page.locator("#usage-table tbody tr", has_text="chat")
    expect(row.locator("td").first).to_have_text(str(before + 3))
    expect(row.locator("td").nth(1)).to_have_text("0")  # the previous period had none

    link = page.get_by_role("link", name="Export CSV")
    answer = context.request.get(link.get_attribute("href") or "")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/csv")
    assert "attachment" in answer.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.text())))
    assert {r["group"] for r in rows} == {"chat"}
    assert sum(int(r["requests"]) for r in rows) == before + 3
    assert sum(int(r["input_tokens"]) for r in rows) > 0
    page.close()


def test_a_bad_filter_is_answered_in_the_admin_apis_words(site: Site) -> None:
    page = site.signed_in("auditor").new_page()
    answer = page.goto("/usage?key=no-such-key")
    assert answer is not None
    assert answer.status == 400
    expect(page.get_by_role("alert")).to_contain_text("no-such-key")
    page.close()


def test_the_dashboard_refreshes_its_figures_from_its_fragment(site: Site) -> None:
    """The dashboard's script fetches `data-refresh` every 15 s and puts it in place: the
    fragment answers the figures as they are now."""
    context = site.signed_in("viewer")
    page = context.new_page()
    page.goto("/dashboard")
    shown = int(page.locator('[data-metric="requests"]').inner_text().replace(",", ""))
    fragment = page.locator("#dashboard-charts").get_attribute("data-refresh") or ""
    _requests(site, 2)
    answer = context.request.get(fragment)
    assert answer.status == 200
    assert "<html" not in answer.text()  # a fragment, not a page
    part = context.new_page()
    part.set_content(answer.text())
    now = int(part.locator('[data-metric="requests"]').inner_text().replace(",", ""))
    assert now == shown + 2
    part.close()
    page.close()

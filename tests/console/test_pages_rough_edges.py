"""The rough edges a new user found (issue 33, points 1-7), each proved gone in Chromium: a
session that ends under an open page or a typed form; charts (dates, colours, round ticks,
empty states, text size, the last label, hover values); every validation error at its field
in plain words; a redirect after every form; plain labels and filled columns; the 390 px
layout; names for ids; confirmations; the menu on a 404; collapsed audit diffs."""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, Page, expect

from tests.console.conftest import KEY, PASSWORD, Site, sign_in


def _fresh(site: Site, role: str, **options: object) -> tuple[BrowserContext, Page]:
    """A context of its own (its session is ended by the test), signed in as `role`."""
    context = site.browser.new_context(base_url=site.url, **options)  # type: ignore[arg-type]
    context.set_default_timeout(10_000)
    page = context.new_page()
    sign_in(page, site.account(role))
    return context, page


def _end_session(site: Site, context: BrowserContext) -> None:
    """The session ends on the server (as after idling past LLMRELAY_SESSION_IDLE_S); the
    browser still holds its cookie."""
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    answer = httpx.post(
        f"{site.url}/api/admin/auth/logout",
        headers={
            "Cookie": f"llmrelay_session={cookies['llmrelay_session']}",
            "X-CSRF-Token": cookies["llmrelay_console_csrf"],
        },
    )
    assert answer.status_code == 204, answer.text


def _chat(site: Site, text: str, key: str = KEY) -> str:
    answer = httpx.post(
        f"{site.gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "chat", "messages": [{"role": "user", "content": text}]},
    )
    assert answer.status_code == 200, answer.text
    request_id = answer.headers["x-request-id"]
    site.gateway.records([request_id])
    return request_id


def test_an_ended_session_is_a_notice_not_a_pasted_sign_in_page(site: Site) -> None:
    context, page = _fresh(site, "viewer")
    page.goto("/dashboard?refresh=2")
    expect(page.locator("#dashboard-charts .chart").first).to_be_visible()
    _end_session(site, context)
    notice = page.locator("#session-ended")
    expect(notice).to_be_visible(timeout=15_000)
    expect(notice.get_by_role("link", name="Sign in again")).to_have_attribute(
        "href", "/sign-in?next=%2Fdashboard%3Frefresh%3D2"
    )
    assert page.locator("#dashboard-charts form[action='/sign-in']").count() == 0
    assert page.locator("#provider-health input[type=password]").count() == 0
    context.close()


def test_a_form_sent_after_the_session_ended_keeps_what_was_typed(site: Site) -> None:
    context, page = _fresh(site, "tenant_admin")
    page.goto("/projects")
    page.get_by_label("Name").fill("typed-before-expiry")
    page.get_by_label("Requests a minute").fill("77")
    _end_session(site, context)
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("alert")).to_contain_text("what you typed is kept")
    page.get_by_label("Email").fill(site.account("tenant_admin"))
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/resume")
    expect(page.locator("#draft")).to_contain_text("typed-before-expiry")
    expect(page.locator("#draft")).to_contain_text("77")
    page.get_by_role("button", name="Send again").click()
    expect(page.get_by_role("heading", name="typed-before-expiry")).to_be_visible()
    expect(page.get_by_label("Requests a minute")).to_have_value("77")
    context.close()


def test_charts_dates_colours_ticks_empty_states_and_hover(site: Site) -> None:
    _chat(site, "for the charts")
    context, page = _fresh(site, "viewer", viewport={"width": 1280, "height": 900})
    page.goto("/dashboard?window=7d")
    charts = page.locator("#dashboard-charts")
    requests = charts.locator(".chart", has_text="Requests").first
    ticks = requests.locator("svg.area text.tick").all_text_contents()
    assert ticks and all(t[:3].isalpha() and t[4:].isdigit() for t in ticks), ticks  # "Dec 04"
    # a lone point has the colour of its legend (p95 is not drawn in p50's colour)
    latency = charts.locator(".chart", has_text="Latency")
    dots = latency.locator("circle.dot")
    assert dots.count() >= 2
    for index in range(2):
        dot = dots.nth(index)
        legend = latency.locator(f".legend.s{dot.get_attribute('class').split('s')[-1]}")  # type: ignore[union-attr]
        fill = dot.evaluate("e => getComputedStyle(e).fill")
        colour = legend.evaluate("e => getComputedStyle(e).color")
        assert fill == colour
    assert dots.nth(0).evaluate("e => getComputedStyle(e).fill") != dots.nth(1).evaluate(
        "e => getComputedStyle(e).fill"
    )
    # round ticks, and an empty state on every chart that has nothing
    for label in requests.locator("svg.y-axis text").all_text_contents():
        assert float(label.replace(",", "")) == int(float(label.replace(",", ""))), label
    expect(charts.locator(".chart", has_text="Error rate")).to_contain_text(
        "No errors in this window"
    )
    # text keeps its size at any width; the last x label is inside its chart
    size = requests.locator("svg.area text.tick").first.evaluate(
        "e => e.getBoundingClientRect().height"
    )
    page.set_viewport_size({"width": 2400, "height": 900})
    wide = requests.locator("svg.area text.tick").first.evaluate(
        "e => e.getBoundingClientRect().height"
    )
    assert abs(wide - size) < 1, (size, wide)
    last = requests.locator("svg.area text.tick").last.evaluate(
        "e => e.getBoundingClientRect().right"
    )
    right = requests.evaluate("e => e.getBoundingClientRect().right")
    assert last <= right
    # hovering a bucket shows its time and values
    column = requests.locator("g.col").last
    readout = column.locator(".readout")
    expect(readout).to_be_hidden()
    column.locator("rect").hover()
    expect(readout).to_be_visible()
    expect(readout).to_contain_text("requests")
    context.close()


def test_every_error_at_its_field_in_plain_words(site: Site) -> None:
    page = site.signed_in("tenant_admin").new_page()
    page.goto("/keys")
    page.get_by_label("Project", exact=True).select_option(label="main")
    page.get_by_label("Name").fill("two-mistakes")
    page.get_by_label("Requests a minute").fill("lots")
    page.get_by_label("Tokens a minute").fill("0")
    page.get_by_role("button", name="Create key").click()
    invalid = page.locator(".field.invalid")
    expect(invalid).to_have_count(2)
    expect(
        page.locator(".field.invalid", has=page.get_by_label("Requests a minute"))
    ).to_contain_text("must be a whole number")
    expect(
        page.locator(".field.invalid", has=page.get_by_label("Tokens a minute"))
    ).to_contain_text("must be 1 or more")
    assert "Input should" not in page.content()
    # the provider's API key survives a refused form
    page.goto("/providers")
    page.get_by_label("Slug").fill("Not A Slug")
    page.get_by_label("API key").fill("sk-kept-after-an-error-1234")
    page.get_by_role("button", name="Add provider").click()
    expect(page.locator(".field.invalid", has=page.get_by_label("Slug"))).to_be_visible()
    expect(page.get_by_label("API key")).to_have_value("sk-kept-after-an-error-1234")
    assert "String should match" not in page.content()
    page.close()


def test_a_reload_never_posts_a_form_again(site: Site) -> None:
    page = site.signed_in("developer").new_page()
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.goto("/keys")
    page.get_by_label("Project", exact=True).select_option(label="main")
    page.get_by_label("Name").fill("reload-me")
    page.get_by_role("button", name="Create key").click()
    secret = page.locator("#key-secret").inner_text().strip()
    assert page.url.endswith("/secret")
    page.reload()
    assert len(posts) == 1
    expect(page.get_by_role("heading", name="reload-me")).to_be_visible()  # the key's page
    assert secret not in page.content()  # shown once
    with site.admin() as admin:
        names = [k["name"] for k in admin.get("/keys", params={"limit": 500}).json()["data"]]
    assert names.count("reload-me") == 1
    page.close()


def test_plain_labels_and_filled_columns(site: Site) -> None:
    refused = httpx.post(
        f"{site.gateway.base_url}/chat/completions",
        headers={"Authorization": "Bearer not-a-key-at-all-0123456789"},
        json={"model": "chat", "messages": [{"role": "user", "content": "who?"}]},
    )
    assert refused.status_code == 401
    site.gateway.records([refused.headers["x-request-id"]])
    _chat(site, "a keyed one")
    page = site.signed_in("platform_admin").new_page()  # requests of no tenant: theirs
    page.goto("/usage?group_by=key")
    table = page.locator("#usage-table")
    expect(table).to_contain_text("No key (unauthenticated)")
    expect(table.locator("tbody th", has_text="fixed")).to_have_count(1)
    assert table.locator("tbody th", has_text="all").count() == 0

    # a test connection fills the health row and, listing models, the inventory
    with site.admin() as admin:
        provider = next(p for p in admin.get("/providers").json()["data"] if p["slug"] == "up")
    page.goto(f"/providers/{provider['id']}")
    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#test-result")).to_contain_text("models listed")
    expect(page.locator("#discovery-job .job-status")).to_have_text("succeeded", timeout=20_000)
    page.reload()
    assert "Never listed" not in page.content()
    expect(page.locator(".chips li").first).to_be_visible()
    page.goto("/dashboard")
    row = page.locator("#health-table tr", has_text="up").first
    checked = row.locator("td").nth(4).inner_text()
    assert checked[:2] == "20", checked  # a time, not blank

    # the Playground offers no embedding model for chat, and keeps "served by"
    page.goto("/playground")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Load models").click()
    expect(page.locator("#pg-model option[value=chat]")).to_have_count(1)
    assert page.locator("#pg-model option[value=embed]").count() == 0
    page.get_by_label("Model", exact=True).select_option("chat")
    page.get_by_label("Message").fill("who served this?")
    page.get_by_role("button", name="Send (streaming)").click()
    expect(page.locator("#pg-status")).to_contain_text("finished: stop")
    expect(page.locator("#pg-served")).to_contain_text("served by up")
    page.close()


def test_a_phone_wide_screen(site: Site) -> None:
    request_id = _chat(site, "on a phone")
    context, page = _fresh(site, "tenant_admin", viewport={"width": 390, "height": 844})
    for path in ("/activity", "/keys", "/usage", "/models", "/users", f"/activity/{request_id}"):
        page.goto(path)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
    nav = page.get_by_role("navigation", name="Console")
    expect(nav).to_be_hidden()  # behind its button; the content comes first
    menu = page.get_by_role("button", name="Menu")
    menu.click()
    expect(nav).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "true")
    nav.get_by_role("link", name="Keys", exact=True).click()
    page.wait_for_url("**/keys")
    expect(nav).to_be_hidden()
    context.close()


def test_names_confirmations_the_menu_on_a_404_and_collapsed_diffs(site: Site) -> None:
    request_id = _chat(site, "whose key?")
    page = site.signed_in("tenant_admin").new_page()
    page.goto(f"/activity/{request_id}")
    key_fact = page.locator(".facts dd", has_text="in project")
    expect(key_fact).to_have_text("fixed in project main")
    with site.admin() as admin:
        project = admin.get("/projects", params={"name": "main"}).json()["data"][0]
        tenant = admin.get(f"/tenants/{site.tenant_id}").json()
    page.goto(f"/projects/{project['id']}")
    expect(page.locator(".facts")).to_contain_text(tenant["name"])
    assert site.tenant_id not in page.locator(".facts").inner_text()
    page.goto("/account")
    expect(page.locator(".facts")).to_contain_text(f"tenant admin in {tenant['name']}")

    # deleting asks first: the button appears only once the question is open
    page.goto(f"/projects/{project['id']}")
    expect(page.get_by_role("button", name="Delete project and its keys")).to_be_hidden()
    page.locator("summary", has_text="Delete project and its keys").click()
    expect(page.get_by_role("button", name="Delete project and its keys")).to_be_visible()

    answer = page.goto("/no-such-page")
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("navigation", name="Console")).to_be_visible()

    page.goto("/audit")
    diffs = page.locator("details.diff")
    expect(diffs.first).to_be_visible()
    assert diffs.evaluate_all("ds => ds.filter(d => d.open).length") == 0
    page.close()

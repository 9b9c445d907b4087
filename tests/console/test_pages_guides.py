"""The Playground streams through the real data plane with a key kept in the page's memory
only (deltas shown before the answer ends; Stop works; the key reaches no console route,
no storage, no cookie), errors in the OpenAI shape are shown; Quickstart's snippets name
this gateway's real address and models; the catalogue lists prices."""

from __future__ import annotations

import json

from playwright.sync_api import Request, expect

from tests.console.conftest import KEY, Site


def test_the_playground_streams_with_a_key_held_in_the_page(site: Site) -> None:
    context = site.signed_in("developer")
    page = context.new_page()
    sent: list[Request] = []
    page.on("request", lambda request: sent.append(request))
    page.goto("/playground")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Load models").click()
    expect(page.locator("#pg-model option[value=story]")).to_have_count(1)

    # "story" streams three words, then stalls: they must show while the answer is open
    page.get_by_label("Model", exact=True).select_option("story")
    page.get_by_label("Message").fill("one two three four five")
    page.get_by_role("button", name="Send (streaming)").click()
    expect(page.locator("#pg-output")).to_have_text("one two three ")
    expect(page.locator("#pg-output")).to_have_attribute("aria-busy", "true")
    expect(page.get_by_role("button", name="Stop")).to_be_enabled()
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#pg-status")).to_have_text("stopped")

    page.get_by_label("Model", exact=True).select_option("chat")
    page.get_by_label("Message").fill("hello streaming world")
    page.get_by_role("button", name="Send (streaming)").click()
    expect(page.locator("#pg-status")).to_contain_text("finished: stop")
    expect(page.locator("#pg-output")).to_have_text("hello streaming world")

    for request in sent:
        carries = KEY in (request.post_data or "") or KEY in str(request.all_headers())
        if carries:
            assert request.url.startswith(f"{site.url}/v1/"), request.url
    assert any(r.url.endswith("/v1/chat/completions") for r in sent)
    stored = page.evaluate("() => JSON.stringify([localStorage, sessionStorage, document.cookie])")
    assert KEY not in stored
    assert all(KEY not in c["value"] for c in context.cookies())
    page.close()


def test_the_playground_shows_the_gateways_error(site: Site) -> None:
    page = site.signed_in("developer").new_page()
    page.goto("/playground")
    page.get_by_label("API key").fill("not-a-key-0123456789")
    page.get_by_role("button", name="Load models").click()
    expect(page.locator("#pg-error")).to_contain_text("401")
    page.close()


def test_quickstart_snippets_name_this_gateway_and_its_models(site: Site) -> None:
    context = site.signed_in("developer")
    page = context.new_page()
    page.goto("/quickstart")
    base = f"{site.url}/v1"
    for language in ("curl", "python", "node"):
        for step in ("first", "stream"):
            code = page.locator(f"#{step}-{language}").inner_text()
            assert base in code, (step, language, code)
            assert '"chat"' in code
    # a forwarded host from a peer that is not a trusted proxy is not believed
    answer = context.request.get("/quickstart", headers={"X-Forwarded-Host": "evil.example"})
    assert "evil.example" not in answer.text()
    page.close()


def test_the_catalogue_lists_list_prices(site: Site) -> None:
    page = site.signed_in("billing").new_page()
    page.goto("/catalogue")
    row = page.locator("#catalogue tr", has_text="gpt-4o-mini").first
    expect(row).to_contain_text("$0.15")
    expect(row).to_contain_text("128,000")
    page.close()


def test_a_conversation_of_several_turns_in_markdown_and_two_models_side_by_side(
    site: Site,
) -> None:
    page = site.signed_in("developer").new_page()
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.post_data or "") if r.method == "POST" else None)
    page.goto("/playground")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Load models").click()
    expect(page.locator("#pg-model option[value=chat]")).to_have_count(1)
    page.get_by_label("Model", exact=True).select_option("chat")
    page.locator("summary", has_text="Parameters").click()
    page.get_by_label("Temperature").fill("0.3")
    page.get_by_label("Message").fill("**bold** and `code`\n\n- one\n- two")
    page.get_by_role("button", name="Send (streaming)").click()
    answer = page.locator("#pg-output")
    expect(answer.locator("strong")).to_have_text("bold")  # drawn as markdown once done
    expect(answer.locator("code")).to_have_text("code")
    expect(answer.locator("li")).to_have_count(2)
    page.get_by_label("Message").fill("a second turn")
    page.get_by_role("button", name="Send (streaming)").click()
    expect(page.locator("#pg-output")).to_have_text("a second turn")
    expect(page.locator("#pg-transcript .turn")).to_have_count(4)
    body = json.loads(sent[-1])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["temperature"] == 0.3

    page.get_by_role("button", name="New conversation").click()
    expect(page.locator("#pg-transcript .turn")).to_have_count(0)
    page.get_by_label("Compare with a second model").check()
    page.locator("#pg-model-b").select_option("story")
    page.get_by_label("Message").fill("alpha beta gamma delta")
    page.get_by_role("button", name="Send (streaming)").click()
    expect(page.locator("#pg-output")).to_have_text("alpha beta gamma delta")
    expect(page.locator("#pg-output-b")).to_have_text("alpha beta gamma ")  # "story" stalls
    expect(page.locator("#pg-pane-title-b")).to_have_text("story")
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#pg-status-b")).to_have_text("stopped")
    page.close()

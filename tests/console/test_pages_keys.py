"""API keys made in the console serve real requests: created (the secret shown once, never
again), rotated (the old secret stops), revoked; a capture-on key's bodies show on the
request's page, escaped; limits typed wrong come back next to their field."""

from __future__ import annotations

import httpx
import openai
from playwright.sync_api import Dialog, Page, expect

from tests.console.conftest import Site
from tests.support.closing import Closing


def _create_key(page: Page, name: str, capture: str = "") -> str:
    page.goto("/keys")
    page.get_by_label("Project").last.select_option(label="main")
    page.get_by_label("Name").fill(name)
    if capture:
        page.get_by_label("Payload capture").select_option(capture)
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("heading", name=f"Key {name} created")).to_be_visible()
    return page.locator("#key-secret").inner_text().strip()


def _client(site: Site, secret: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=secret, base_url=site.gateway.base_url, max_retries=0)


def test_a_key_created_in_the_console_serves_a_request(site: Site, closing: Closing) -> None:
    page = site.signed_in("developer").new_page()
    secret = _create_key(page, "from-the-console")
    site.key_answers(secret, 200)
    reply = closing(_client(site, secret)).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "made in the console"}]
    )
    assert reply.choices[0].message.content == "made in the console"
    page.get_by_role("link", name="Go to the key").click()
    expect(page.get_by_role("heading", name="from-the-console")).to_be_visible()
    assert secret not in page.content()  # shown once: never again

    page.get_by_role("button", name="Rotate").click()
    rotated = page.locator("#key-secret").inner_text().strip()
    assert rotated != secret
    site.key_answers(rotated, 200)
    site.key_answers(secret, 401)

    page.get_by_role("link", name="Go to the key").click()
    page.locator("summary", has_text="Revoke for good").click()  # asks first
    expect(page.get_by_text("a revoked key never works again")).to_be_visible()
    page.get_by_role("button", name="Revoke for good").click()
    expect(page.locator("h1 .badge")).to_have_text("revoked")
    site.key_answers(rotated, 401)
    page.close()


def test_a_capture_on_key_shows_its_payload_escaped(site: Site, closing: Closing) -> None:
    page = site.signed_in("tenant_admin").new_page()
    secret = _create_key(page, "captures", capture="full")
    site.key_answers(secret, 200)
    text = "<script>alert('x')</script> & more"
    completion = closing(_client(site, secret)).chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": text}]
    )
    request_id = completion.headers["x-request-id"]
    site.gateway.records([request_id])
    dialogs: list[str] = []

    def seen(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", seen)
    page.goto(f"/activity/{request_id}")
    expect(page.locator("#payload-request")).to_contain_text(text)
    expect(page.locator("#payload-response")).to_contain_text("alert")
    assert not dialogs  # shown as text, never run
    page.close()


def test_a_key_without_capture_shows_no_payload(site: Site, closing: Closing) -> None:
    page = site.signed_in("viewer").new_page()
    secret = "console-test-key-0123456789"
    completion = closing(_client(site, secret)).chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "not kept"}]
    )
    request_id = completion.headers["x-request-id"]
    site.gateway.records([request_id])
    page.goto(f"/activity/{request_id}")
    expect(page.get_by_text("does not capture payloads")).to_be_visible()
    assert "not kept" not in page.content()
    page.close()


def test_a_wrong_limit_is_shown_next_to_its_field_with_the_input_kept(site: Site) -> None:
    page = site.signed_in("developer").new_page()
    page.goto("/keys")
    page.get_by_label("Project").last.select_option(label="main")
    page.get_by_label("Name").fill("bad-limits")
    page.get_by_label("Requests a minute").fill("lots")
    page.get_by_label("IP allowlist").fill("10.0.0.0/8, 192.168.1.1")
    page.get_by_role("button", name="Create key").click()
    field = page.locator(".field.invalid")
    expect(field).to_have_count(1)
    expect(field.get_by_label("Requests a minute")).to_have_value("lots")
    expect(field.locator(".note.error")).to_have_text("must be a whole number, like 60")
    expect(page.get_by_label("IP allowlist")).to_have_value("10.0.0.0/8, 192.168.1.1")
    expect(page.get_by_label("Name")).to_have_value("bad-limits")
    with site.admin() as admin:
        names = [k["name"] for k in admin.get("/keys", params={"limit": 500}).json()["data"]]
    assert "bad-limits" not in names
    page.close()


def test_a_key_with_scopes_made_in_the_console_calls_only_those_apis(
    site: Site, closing: Closing
) -> None:
    page = site.signed_in("developer").new_page()
    page.goto("/keys")
    page.get_by_label("Project").last.select_option(label="main")
    page.get_by_label("Name").fill("scoped-typo")
    page.get_by_label("APIs (scopes)").fill("chat, chatt")
    page.get_by_role("button", name="Create key").click()
    field = page.locator(".field.invalid")
    expect(field).to_have_count(1)
    expect(field.get_by_label("APIs (scopes)")).to_have_value("chat, chatt")

    page.get_by_label("Name").fill("scoped")
    page.get_by_label("APIs (scopes)").fill("chat, models")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("heading", name="Key scoped created")).to_be_visible()
    secret = page.locator("#key-secret").inner_text().strip()
    site.key_answers(secret, 200)
    client = closing(_client(site, secret))
    reply = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "scoped"}]
    )
    assert reply.choices[0].message.content == "scoped"
    refused = httpx.post(
        f"{site.gateway.base_url}/embeddings",
        headers={"Authorization": f"Bearer {secret}"},
        json={"model": "chat", "input": "x"},
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "scope_not_allowed"

    page.get_by_role("link", name="Go to the key").click()
    expect(page.get_by_label("APIs (scopes)")).to_have_value("chat models")
    page.get_by_label("APIs (scopes)").fill("")  # blank: every API
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()
    with site.admin() as admin:
        keys = admin.get("/keys", params={"limit": 500}).json()["data"]
    assert [k["scopes"] for k in keys if k["name"] == "scoped"] == [None]
    assert "scoped-typo" not in [k["name"] for k in keys]
    page.close()

"""An openai_codex provider's page in the console: the device code sign-in (the code shown,
"not approved yet" until the user approves at the stand-in issuer, then the account), its
usage limits read now, and signing out; with two accounts, each listed (resource, email,
plan, usage limits, resting until), one signed in onto a named resource, one signed out by
its row's button, then every one; a role without providers:write sees no button and is
refused the form."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from playwright.sync_api import expect

from tests.console.conftest import Site
from tests.console.test_pages_matrix import _MARKUP_PROBLEMS as MARKUP_PROBLEMS


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
    assert page.evaluate(MARKUP_PROBLEMS) == []  # the accounts' rows and forms: ids, labels

    page.get_by_role("link", name="Read the usage limits now").click()
    expect(account).to_contain_text(f"{site.codex.used_percent:g} % used of 300 min")
    expect(account).to_contain_text("Secondary window")

    account.get_by_text("Sign every account out…").click()
    account.get_by_role("button", name="Sign every account out", exact=True).click()
    expect(account).to_contain_text("Signed every account out.")
    expect(account).to_contain_text("No account is signed in")
    page.close()


ALICE = ("acct-alice", "alice@example.com")
BOB = ("acct-bob", "bob@example.com")


@dataclass
class Operator:
    """Plain HTTP with the session of a role's console sign-in: forms are posted as the
    page's buttons post them (no JavaScript in play), with the CSRF token and the Origin."""

    client: httpx.Client
    csrf: str

    def get(self, path: str, **query: str) -> httpx.Response:
        return self.client.get(path, params=query)

    def post(self, path: str, **form: str) -> httpx.Response:
        return self.client.post(path, data={**form, "csrf_token": self.csrf})


@contextmanager
def operator(site: Site, role: str) -> Iterator[Operator]:
    cookies = {c["name"]: c["value"] for c in site.signed_in(role).cookies()}
    with httpx.Client(
        base_url=site.url, cookies=cookies, headers={"Origin": site.url}, timeout=60
    ) as client:
        yield Operator(client, cookies["llmrelay_console_csrf"])


def rows(page: str) -> dict[str, str]:
    """The accounts table's rows by their resource: each row's text, tags dropped."""
    found = re.findall(r'<tr data-account="([^"]+)">(.*?)</tr>', page, re.S)
    return {
        name: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split()) for name, row in found
    }


def hidden(page: str, name: str) -> str:
    match = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)">', page)
    assert match is not None, name
    return html.unescape(match.group(1))


def device_sign_in(site: Site, client: Operator, provider_id: str, resource: str) -> str:
    """Start a device code sign-in on the page (onto `resource`, blank: none named), approve
    the code at the stand-in issuer, finish: the page the finish redirects to."""
    started = client.post(f"/providers/{provider_id}/codex/device", resource=resource)
    assert started.status_code == 200, started.text
    banner = re.search(
        r'<div class="banner" role="status" id="codex-device">(.*?)</div>', started.text, re.S
    )
    assert banner is not None, started.text
    code = re.search(r"<strong><code>([^<]+)</code></strong>", banner.group(1))
    assert code is not None, banner.group(1)
    site.codex.approve(code.group(1))
    fields = ("device_auth_id", "user_code", "verification_url", "resource")
    finished = client.post(
        f"/providers/{provider_id}/codex/device/finish",
        **{name: hidden(banner.group(1), name) for name in fields},
    )
    assert finished.status_code == 303, finished.text
    assert finished.headers["location"] == f"/providers/{provider_id}"
    return client.get(finished.headers["location"]).text


def test_every_account_listed_signed_in_onto_a_resource_and_out_one_by_one(site: Site) -> None:
    with site.admin() as admin:
        made = admin.post(
            "/providers",
            params={"tenant_id": site.tenant_id},
            json={"slug": "codex-pair", "type": "openai_codex", "base_url": site.codex.backend},
            timeout=60,
        )
        assert made.status_code == 201, made.text
    provider_id = made.json()["id"]
    codex = site.codex
    before = (codex.account_id, codex.email)
    try:
        with operator(site, "tenant_admin") as client:
            # a resource name the admin API would refuse: said next to the field, no code
            refused = client.post(f"/providers/{provider_id}/codex/device", resource="Team B")
            assert refused.status_code == 400
            assert 'id="f-codex-resource-note"' in refused.text
            assert 'id="codex-device"' not in refused.text

            codex.signing_in(*ALICE)
            shown = device_sign_in(site, client, provider_id, "team-a")
            assert "Signed alice@example.com in onto resource team-a." in shown
            codex.signing_in(*BOB)
            shown = device_sign_in(site, client, provider_id, "")  # named after the email
            assert "Signed bob@example.com in onto resource bob." in shown
            assert list(rows(shown)) == ["team-a", "bob"]

            codex.used_by[ALICE[0]] = 100.0  # alice's window used up: resting until reset
            codex.used_by[BOB[0]] = 40.0
            listed = rows(client.get(f"/providers/{provider_id}", usage="now").text)
            assert "alice@example.com (pro)" in listed["team-a"]
            resets = datetime.fromtimestamp(int(codex.resets_at), UTC).strftime("%Y-%m-%d %H:%M")
            assert f"Primary window: 100 % used of 300 min resets {resets} UTC" in listed["team-a"]
            assert "reached until" in listed["team-a"]
            assert "bob@example.com (pro)" in listed["bob"]
            assert "Primary window: 40 % used of 300 min" in listed["bob"]
            assert "Secondary window: 3 % used of 10080 min" in listed["bob"]
            assert "reached" not in listed["bob"]
            for row in listed.values():
                assert "refreshed" in row and "Sign out" in row

        # a role without providers:write: the accounts, no button, and the form refused
        with operator(site, "viewer") as viewer:
            page = viewer.get(f"/providers/{provider_id}").text
            listed = rows(page)
            assert list(listed) == ["team-a", "bob"]
            assert not any("Sign out" in row for row in listed.values())
            assert "/codex/sign-out" not in page and "/codex/device" not in page
            assert viewer.post(f"/providers/{provider_id}/codex/sign-out").status_code == 403
            signed_out = f"/providers/{provider_id}/codex/sign-out"
            assert viewer.post(signed_out, resource="bob").status_code == 403

        with operator(site, "tenant_admin") as client:
            # one row's button: bob only
            out = client.post(f"/providers/{provider_id}/codex/sign-out", resource="bob")
            assert out.status_code == 303, out.text
            page = client.get(out.headers["location"]).text
            assert "Signed bob out." in page
            assert list(rows(page)) == ["team-a"]
            with site.admin() as admin:
                left = admin.get(f"/providers/{provider_id}/codex").json()["accounts"]
            assert [(a["resource"], a["email"]) for a in left] == [("team-a", ALICE[1])]

            # one no longer signed in: the admin API's 404, said on the page
            gone = client.post(f"/providers/{provider_id}/codex/sign-out", resource="bob")
            assert gone.status_code == 404
            assert "no account &#39;bob&#39; is signed in here" in gone.text

            # every account
            out = client.post(f"/providers/{provider_id}/codex/sign-out")
            assert out.status_code == 303, out.text
            page = client.get(out.headers["location"]).text
            assert "Signed every account out." in page and rows(page) == {}
            assert "No account is signed in" in page
        with site.admin() as admin:
            assert admin.get(f"/providers/{provider_id}/codex").json()["accounts"] == []
            resources = admin.get(f"/providers/{provider_id}/resources").json()["data"]
        assert sorted(r["name"] for r in resources) == ["bob", "team-a"]  # they stay
    finally:
        codex.signing_in(*before)
        codex.used_by.clear()

"""Single sign-on with OpenID Connect, driven through Chromium against a real local identity
provider (tests/support/oidc_provider.py: discovery, authorization code with PKCE, RS256 ID
tokens, JWKS): a first sign-in makes the account just in time with the role its groups map
to; a group change moves the role on the next sign-in; a person whose groups map to nothing is
refused and nothing is made; a token that is not right (audience, expiry, key, nonce) signs
nobody in; many people sign in, with no cap."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.console.conftest import ADMIN_TOKEN, console_config
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.oidc_provider import OidcProvider

ROLE_MAP = "llm-admins=tenant_admin,llm-devs=developer,ops=platform_admin"


class World:
    def __init__(self, gateway: GatewayProcess, provider: OidcProvider) -> None:
        self.gateway = gateway
        self.provider = provider

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.gateway.url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=60,
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    upstream = MockUpstream().start()
    provider = OidcProvider().start()
    gateway = GatewayProcess(
        tmp_path_factory.mktemp("sso"),
        config=console_config(upstream),
        env={
            "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
            "LLMRELAY_OIDC_ISSUER": provider.issuer,
            "LLMRELAY_OIDC_CLIENT_ID": provider.client_id,
            "LLMRELAY_OIDC_CLIENT_SECRET": provider.client_secret,
            "LLMRELAY_OIDC_NAME": "Test IdP",
            "LLMRELAY_OIDC_ROLE_MAP": ROLE_MAP,
        },
    )
    gateway.start(timeout_s=90)
    try:
        yield World(gateway, provider)
    finally:
        code = gateway.stop()
        provider.stop()
        upstream.stop()
    assert code == 0, gateway.logs()


def _sign_in_by_sso(browser: Browser, world: World, next_path: str = "/dashboard") -> Page:
    context = browser.new_context(base_url=world.gateway.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto(f"/sign-in?next={next_path}")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    return page


def test_a_first_sign_in_makes_the_account_with_its_groups_role(
    browser: Browser, world: World
) -> None:
    world.provider.tamper = None
    world.provider.person = {
        "email": "Dev@Example.com",
        "name": "Dee Veloper",
        "groups": ["llm-devs"],
    }
    page = _sign_in_by_sso(browser, world, "/keys")
    page.wait_for_url("**/keys")
    nav = page.get_by_role("navigation", name="Console")
    expect(nav.get_by_role("link", name="Playground")).to_be_visible()
    expect(nav.get_by_role("link", name="Users & roles")).to_have_count(0)
    expect(page.locator(".who-email")).to_have_text("dev@example.com")
    request = world.provider.token_requests[-1]
    assert request["code_verifier"] and "client_secret" not in request  # PKCE; secret by Basic
    with world.admin() as admin:
        (user,) = admin.get("/users", params={"email": "dev@example.com"}).json()["data"]
    assert user["name"] == "Dee Veloper"
    assert [m["role"] for m in user["memberships"]] == ["developer"]

    # their group changes at the provider: the next sign-in moves the role
    world.provider.person = {**world.provider.person, "groups": ["llm-devs", "llm-admins"]}
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("link", name="Sign in with Test IdP").click()
    page.wait_for_url("**/dashboard")
    expect(
        page.get_by_role("navigation", name="Console").get_by_role("link", name="Users & roles")
    ).to_be_visible()
    page.context.close()


def test_a_person_whose_groups_map_to_nothing_is_refused(browser: Browser, world: World) -> None:
    world.provider.tamper = None
    world.provider.person = {"email": "stranger@example.com", "name": "S", "groups": ["sales"]}
    page = _sign_in_by_sso(browser, world)
    expect(page.get_by_role("alert")).to_contain_text("none of your groups grants a role here")
    assert "/sign-in" in page.url or page.url.endswith("/sso/callback") or "callback" in page.url
    with world.admin() as admin:
        assert admin.get("/users", params={"email": "stranger@example.com"}).json()["data"] == []
    page.context.close()


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        ("audience", "another client"),
        ("expired", "expired"),
        ("key", "signature"),
        ("nonce", "nonce"),
    ],
)
def test_a_wrong_id_token_signs_nobody_in(
    browser: Browser, world: World, tamper: str, words: str
) -> None:
    world.provider.person = {"email": f"{tamper}@example.com", "groups": ["llm-devs"]}
    world.provider.tamper = tamper
    try:
        page = _sign_in_by_sso(browser, world)
        expect(page.get_by_role("alert")).to_contain_text(words)
        assert not any(c["name"] == "llmrelay_session" for c in page.context.cookies())
        page.goto("/dashboard")
        assert "/sign-in" in page.url
        page.context.close()
    finally:
        world.provider.tamper = None


def test_many_people_sign_in_with_no_cap(browser: Browser, world: World) -> None:
    world.provider.tamper = None
    for n in range(4):
        world.provider.person = {"email": f"crowd-{n}@example.com", "groups": ["llm-devs"]}
        page = _sign_in_by_sso(browser, world)
        page.wait_for_url("**/dashboard")
        page.context.close()
    with world.admin() as admin:
        found = admin.get("/users", params={"limit": 500}).json()["data"]
    assert {f"crowd-{n}@example.com" for n in range(4)} <= {u["email"] for u in found}


def test_a_platform_admin_by_group_and_a_password_sign_in_still_works(
    browser: Browser, world: World
) -> None:
    world.provider.tamper = None
    world.provider.person = {"email": "ops@example.com", "groups": ["ops"]}
    page = _sign_in_by_sso(browser, world)
    page.wait_for_url("**/dashboard")
    expect(
        page.get_by_role("navigation", name="Console").get_by_role("link", name="Tenants")
    ).to_be_visible()
    page.context.close()

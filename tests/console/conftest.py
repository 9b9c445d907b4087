"""A real `llmrelay serve` per test module with a mock upstream, accounts of every role
seeded through the admin API (LLMRELAY_ADMIN_TOKEN), and one Chromium per session."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from llmrelay.admin.access import Role
from tests.support.accounts import make_account
from tests.support.browser import chromium
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_codex import MockCodex
from tests.support.mock_upstream import MockUpstream
from tests.support.services import REQUIRE_BROWSER, skipped_services
from tests.support.smtp_sink import SmtpSink

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

#: Without the playwright package the browser modules cannot even be imported: they are left
#: out of the run with the loud notice (or, under LLMRELAY_TEST_REQUIRE_BROWSER=1, fail).
if importlib.util.find_spec("playwright") is None:
    if REQUIRE_BROWSER:
        raise RuntimeError("tests/console needs the playwright package (pip install playwright)")
    skipped_services.add("the playwright package (pip install playwright)")
    collect_ignore_glob = ["test_pages_*.py", "screenshots.py"]

ADMIN_TOKEN = "console-admin-token-0123456789abcdef"
PASSWORD = "console password 4821"
KEY = "console-test-key-0123456789"
CAPTURE_KEY = "console-capture-key-0123456789"
ROLES = [role.value for role in Role]


def email_of(role: str) -> str:
    return f"{role.replace('_', '-')}@example.com"


def console_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: sk-upstream-console-0001
    stream_idle_timeout_s: 60
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
    pricing: {{input_per_mtok: 1, output_per_mtok: 2}}
  - name: story
    routes: [{{provider: up, upstream_model: stall-after-3}}]
  - name: refused
    routes: [{{provider: up, upstream_model: status-401}}]
  - name: vanished
    routes: [{{provider: up, upstream_model: status-404}}]
  - name: embed
    embedding: true
    routes: [{{provider: up, upstream_model: echo-embedding}}]
projects:
  - name: main
    keys:
      - {{name: fixed, key: {KEY}}}
      - {{name: captured, key: {CAPTURE_KEY}, capture: full}}
"""


@dataclass
class Site:
    """The gateway under test and what was seeded into it."""

    gateway: GatewayProcess
    upstream: MockUpstream
    browser: Browser
    tenant_id: str
    #: Where the gateway's mails go (invitations, password resets).
    mail: SmtpSink
    #: The ChatGPT issuer and Codex backend openai_codex providers sign in at.
    codex: MockCodex
    contexts: dict[str, BrowserContext] = field(default_factory=dict)
    #: Roles whose account exists (made on first use: each costs an argon2 hash).
    accounts: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return self.gateway.url

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=60,  # argon2 on a loaded machine (CI beside other runs) is slow
        )

    def new_context(self, *, javascript: bool = True) -> BrowserContext:
        context = self.browser.new_context(base_url=self.url, java_script_enabled=javascript)
        context.set_default_timeout(30_000)  # a loaded machine: a sign-in (argon2) takes seconds
        return context

    def key_answers(self, secret: str, status: int, timeout_s: float = 10.0) -> None:
        """Wait until `GET /v1/models` with `secret` answers `status`: a key made, rotated or
        revoked in the console reaches the data plane with the next snapshot (polled every
        0.5 s here; within seconds on every replica)."""
        deadline = time.monotonic() + timeout_s
        while True:
            answer = httpx.get(
                f"{self.gateway.base_url}/models", headers={"Authorization": f"Bearer {secret}"}
            )
            if answer.status_code == status:
                return
            assert time.monotonic() < deadline, f"{answer.status_code}, not {status}"
            time.sleep(0.05)

    def account(self, role: str) -> str:
        """The email of the role's account, made through the admin API on first use (a
        member of the default tenant with that role; the platform admin has the flag)."""
        if role not in self.accounts:
            body: dict[str, Any] = {"email": email_of(role), "password": PASSWORD}
            if role == Role.PLATFORM_ADMIN.value:
                body["platform_admin"] = True
            else:
                body |= {"tenant_id": self.tenant_id, "role": role}
            with self.admin() as admin:
                answer = make_account(admin, body)
            assert answer.status_code == 201, answer.text
            self.accounts.add(role)
        return email_of(role)

    def signed_in(self, role: str) -> BrowserContext:
        """A browser context signed in through the sign-in page as the role's account (one
        per role and module)."""
        if role not in self.contexts:
            context = self.new_context()
            page = context.new_page()
            sign_in(page, self.account(role))
            page.close()
            self.contexts[role] = context
        return self.contexts[role]


def sign_in(page: Page, email: str, password: str = PASSWORD) -> None:
    page.goto("/sign-in")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/dashboard")


class Watched:
    """A page whose console errors (CSP violations included) and uncaught errors are kept."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the package's tests. Not for the whole session: Playwright's sync
    API keeps its event loop marked as running while it lives, so no asyncio test could run
    after it (this package's tests are all synchronous)."""
    yield from chromium()


@pytest.fixture(scope="module")
def site(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    upstream = MockUpstream().start()
    mail = SmtpSink().start()
    codex = MockCodex().start()
    folder = tmp_path_factory.mktemp("console")
    gateway = GatewayProcess(
        folder,
        config=console_config(upstream),
        env={
            "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
            "LLMRELAY_ROLLUP_INTERVAL_S": "1",
            "LLMRELAY_SMTP_URL": mail.url(),
            "LLMRELAY_JOBS_POLL_S": "0.2",
            # The tenant admin's providers point at the mock upstream, on loopback: the
            # outbound address policy lets tenants reach that one address only.
            "LLMRELAY_TENANT_OUTBOUND_ALLOW": "127.0.0.1/32",
            "LLMRELAY_CODEX_ISSUER": codex.issuer,
        },
    )
    gateway.env["LLMRELAY_PUBLIC_URL"] = gateway.url  # the links mails carry lead here
    gateway.start(timeout_s=300)  # a busy machine (CI beside other runs) starts it slowly
    try:
        tenants = httpx.get(  # the admin API is built on this first call: give it time
            f"{gateway.url}/api/admin/tenants",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=60,
        ).json()["data"]
        found = Site(gateway, upstream, browser, tenant_id=tenants[0]["id"], mail=mail, codex=codex)
        yield found
        for context in found.contexts.values():
            context.close()
    finally:
        code = gateway.stop()
        upstream.stop()
        mail.stop()
        codex.stop()
    assert code == 0, gateway.logs()


@pytest.fixture
def watched(site: Site) -> Iterator[Callable[[str], Watched]]:
    """`watched(role)`: a new page of the role's signed-in context, its errors kept."""
    pages: list[Page] = []

    def open_page(role: str) -> Watched:
        page = site.signed_in(role).new_page()
        pages.append(page)
        return Watched(page)

    yield open_page
    for page in pages:
        page.close()

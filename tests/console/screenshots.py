"""The console's screenshots in docs/console/ (PNG), taken by Debian's Chromium against a
real `llmrelay serve` with a mock upstream and some traffic:

    PYTHONPATH=src python -m tests.console.screenshots [docs/console]

Not collected by pytest (no test_ prefix): run it after a change to the pages."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

from tests.console.conftest import ADMIN_TOKEN, CAPTURE_KEY, KEY, PASSWORD, console_config
from tests.support.accounts import make_account
from tests.support.browser import CHROMIUM_ARGS
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.services import CHROMIUM

EMAIL = "operator@example.com"


def _traffic(gateway: GatewayProcess) -> str:
    """Requests for the charts (a few failures among them); the id of a captured one."""
    captured = ""
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        for i in range(40):
            model = "refused" if i % 13 == 0 else "chat"
            key = CAPTURE_KEY if i == 7 else KEY
            answer = client.post(
                "/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={"model": model, "messages": [{"role": "user", "content": f"Hello {i}"}]},
            )
            if i == 7:
                captured = answer.headers["x-request-id"]
    gateway.records([captured])
    return captured


def _shoot(page: Page, folder: Path, name: str) -> None:
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def _seed(admin: httpx.Client) -> None:
    """Rows the new pages show: a routing policy, a guardrail policy, a pending invitation."""
    tenant = admin.get("/tenants").json()["data"][0]["id"]
    admin.post("/policies", json={"name": "eu-only", "regions": ["eu"], "strategy": "cost_first"})
    rules = [{"detector": "email", "action": "mask"}, {"detector": "secrets", "action": "block"}]
    admin.post("/guardrails", json={"name": "pii-and-secrets", "rules": rules})
    invited = {"email": "new.colleague@example.com", "tenant_id": tenant, "role": "developer"}
    admin.post("/invitations", json=invited)
    credit = {"amount_usd": "25", "reason": "welcome credit", "adjustment_id": "shots-1"}
    admin.post(f"/billing/{tenant}/adjustments", json=credit)


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    upstream = MockUpstream().start()
    work = Path(tempfile.mkdtemp(prefix="llmrelay-shots-"))
    gateway = GatewayProcess(
        work, config=console_config(upstream), env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    ).start(timeout_s=90)
    try:
        with httpx.Client(
            base_url=f"{gateway.url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=60,
        ) as admin:
            body = {"email": EMAIL, "password": PASSWORD, "platform_admin": True}
            assert make_account(admin, body).status_code == 201
            _seed(admin)
        captured = _traffic(gateway)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(
                base_url=gateway.url, viewport={"width": 1280, "height": 860}
            )
            page = context.new_page()
            page.goto("/sign-in")
            _shoot(page, folder, "sign-in")
            page.get_by_label("Email").fill(EMAIL)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url("**/dashboard")
            _shoot(page, folder, "dashboard")
            page.goto("/providers")
            page.get_by_role("link", name="up", exact=True).click()
            page.get_by_role("button", name="Test connection").click()
            page.locator("#test-result").wait_for()
            _shoot(page, folder, "provider")
            page.goto("/models")
            _shoot(page, folder, "models")
            page.goto("/keys")
            page.get_by_label("Project", exact=True).select_option(label="main")
            page.get_by_label("Name").fill("backend")
            page.get_by_role("button", name="Create key").click()
            _shoot(page, folder, "key-created")
            page.goto("/usage?group_by=model")
            _shoot(page, folder, "usage")
            page.goto(f"/activity/{captured}")
            _shoot(page, folder, "activity-detail")
            page.goto("/playground")
            page.get_by_label("API key").fill(KEY)
            page.get_by_role("button", name="Load models").click()
            page.locator("#pg-model option[value=chat]").wait_for(state="attached")
            page.get_by_label("Model", exact=True).select_option("chat")
            page.get_by_label("Compare with a second model").check()
            page.locator("#pg-model-b").select_option("chat")
            page.get_by_label("Message").fill(
                "**Streams** arrive here as the gateway relays them:\n\n- one turn\n- then the next"
            )
            page.get_by_role("button", name="Send (streaming)").click()
            page.locator("#pg-status-b", has_text="finished").wait_for()
            _shoot(page, folder, "playground")
            for path, name in (
                ("/guardrails", "guardrails"),
                ("/routing", "routing"),
                ("/spend", "spend"),
                ("/users", "users"),
                ("/billing/adjustments", "adjustments"),
                ("/settings", "settings"),
                ("/mail", "mail"),
                ("/webhooks", "webhooks"),
            ):
                page.goto(path)
                _shoot(page, folder, name)
            page.goto("/account")
            page.get_by_role("button", name="Set up two-factor").click()
            _shoot(page, folder, "two-factor")
            dark = browser.new_context(
                base_url=gateway.url,
                viewport={"width": 1280, "height": 860},
                color_scheme="dark",
                storage_state=context.storage_state(),
            )
            night = dark.new_page()
            for path, name in (
                ("/dashboard", "dashboard-dark"),
                ("/guardrails", "guardrails-dark"),
            ):
                night.goto(path)
                _shoot(night, folder, name)
            phone = browser.new_context(
                base_url=gateway.url,
                viewport={"width": 390, "height": 844},
                device_scale_factor=2,
                storage_state=context.storage_state(),
            )
            small = phone.new_page()
            small.goto("/dashboard")
            small.screenshot(path=str(folder / "phone-dashboard.png"))
            small.get_by_role("button", name="Menu").click()
            small.screenshot(path=str(folder / "phone-menu.png"))
            small.goto("/activity")
            small.screenshot(path=str(folder / "phone-activity.png"))
            browser.close()
    finally:
        gateway.stop()
        upstream.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console"))

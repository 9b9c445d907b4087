"""Debian's Chromium driven by Playwright for the console tests (never a browser that
Playwright downloads: `playwright install` is not used). A missing Chromium or playwright
package skips the tests with the loud notice at the end of the run, or fails them under
LLMRELAY_TEST_REQUIRE_BROWSER=1 (.ci/run)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.services import (
    CHROMIUM,
    REQUIRE_BROWSER,
    chromium_available,
    skipped_services,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser

#: Headless, and nothing that reaches the network on its own.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def need_browser() -> None:
    missing = []
    if not chromium_available():
        missing.append(f"Chromium ({CHROMIUM}: apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install playwright)")
    if not missing:
        return
    text = " and ".join(missing)
    if REQUIRE_BROWSER:
        pytest.fail(f"the console's browser tests need {text} (LLMRELAY_TEST_REQUIRE_BROWSER=1)")
    skipped_services.update(missing)
    pytest.skip(f"the console's browser tests need {text}")


def chromium() -> Iterator[Browser]:
    """One browser for the session (each test opens its own contexts: a fresh profile each,
    as Playwright gives every launch and context its own user-data directory)."""
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()

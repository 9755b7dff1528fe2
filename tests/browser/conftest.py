"""Browser tests: Debian's Chromium driven by Playwright against the live test server."""

import os

import pytest

from tests.browser.pages import CHROMIUM, CHROMIUM_ARGS

# Playwright's sync API drives the browser from the test thread while the live server answers from its own.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail("Chromium is not installed (apt-get install chromium); `make test` installs it as root")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page_for(browser):
    """A fresh page in a browser context speaking the given language."""
    contexts = []

    def _page(locale: str = "zh-CN"):
        context = browser.new_context(locale=locale)
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield _page
    for context in contexts:
        context.close()

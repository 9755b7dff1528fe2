"""The Content-Security-Policy allows no inline script (the probe's finding: there was none); every page of the
walkthrough, the admin and the API reference work under it in Chromium without a single violation."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.browser.pages import PASSWORD, log_in, start_conversation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = [
    "/", "/agents/", "/agents/new/", "/chat/", "/knowledge/", "/knowledge/new/", "/agents/workflows/",
    "/agents/workflows/new/", "/api/keys/", "/api/v1/docs/", "/api/v1/redoc/", "/admin/",
    "/admin/agents/agent/", "/admin/llm/modelprovider/add/",
]  # fmt: skip


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD)


def test_every_page_runs_under_the_policy(asgi_live_server, demo, page_for):
    page = page_for("zh-CN")
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text) if "Content Security Policy" in message.text
            else None)  # fmt: skip
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
    )
    base = asgi_live_server.url
    response = page.goto(f"{base}/accounts/login/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    log_in(page, base, "energy-admin")
    for path in PAGES:
        page.goto(f"{base}{path}")
        page.wait_for_load_state("networkidle")
    assert page.locator("#swagger-ui, redoc, .api-content").count() >= 0
    start_conversation(page, base, "")
    page.wait_for_function("document.querySelector('#chat-input') !== null")
    with page.expect_navigation():
        page.select_option("#language-select", "en")  # the switcher's script is a file now, not an attribute
    # ReDoc's bundle is served without its CDN logo (config.redoc): no violation at all, cdn.redoc.ly included.
    assert violations == [], violations


def test_the_api_reference_renders(asgi_live_server, demo, page_for):
    page = page_for("en-US")
    log_in(page, asgi_live_server.url, "energy-admin")
    page.goto(f"{asgi_live_server.url}/api/v1/docs/")
    page.wait_for_selector(".swagger-ui .info", timeout=15_000)
    assert "Agent platform API" in page.locator(".swagger-ui .info").inner_text()

"""A tenant admin sets up an agent (WALKTHROUGH.md): the token-management fields follow the strategy, a preset
fills the maximum, Save keeps a draft, Publish makes version 1."""

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.browser.pages import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD, stdout=open(os.devnull, "w"))  # noqa: SIM115


def test_admin_creates_a_sliding_window_agent_and_publishes_it(live_server, demo, page_for):
    page = page_for("en-US")
    log_in(page, live_server.url, "energy-admin")

    page.click("[data-card=agents] a")
    page.wait_for_url(f"{live_server.url}/agents/")
    assert "能源顾问 / Energy advisor" in page.locator(".agent-table").inner_text()  # the demo agents
    page.click("#new-agent")
    page.wait_for_url(f"{live_server.url}/agents/new/")

    page.fill("#id_name", "Grid helper")
    page.fill("#id_description", "Explains the electricity grid.")
    page.fill("#id_system_prompt", "You explain the electricity grid simply.")

    max_tokens = page.locator("#field-overflow_max_tokens")
    threshold = page.locator("#field-overflow_summary_threshold")
    # No strategy is the default: none of its dependent fields show.
    assert not max_tokens.is_visible() and not threshold.is_visible()

    page.check("input[name=overflow_strategy][value=sliding_window]")
    assert max_tokens.is_visible()
    assert page.locator("#field-overflow_preset").is_visible()
    assert page.locator("#field-overflow_reserve_ratio").is_visible()
    assert not threshold.is_visible()  # summarize only

    page.select_option("#id_overflow_preset", label="GPT-4 (8K)")
    assert page.input_value("#id_overflow_max_tokens") == "8192"

    if os.environ.get("SCREENSHOTS") == "1":
        screens = Path(settings.BASE_DIR) / "bench" / "screens"
        screens.mkdir(parents=True, exist_ok=True)
        page.locator("#token-management").scroll_into_view_if_needed()
        page.screenshot(path=str(screens / "token-management.png"), full_page=True)

    page.check("input[name=overflow_strategy][value=summarize]")
    assert threshold.is_visible()
    page.check("input[name=overflow_strategy][value=sliding_window]")

    with page.expect_navigation():
        page.click("#save-agent")
    assert page.locator("h1").inner_text() == "Grid helper"
    assert "Draft only" in page.locator("#publish-state").inner_text()
    assert "Sliding window" in page.locator("#token-management").inner_text()
    assert "8192" in page.locator("#token-management").inner_text()

    page.click("#publish-agent")
    with page.expect_navigation():
        page.click("#confirm-publish")
    assert "Published version 1." in page.locator(".messages").inner_text()
    assert page.locator("#versions [data-version='1']").is_visible()
    assert "v1" in page.locator("#publish-state").inner_text()

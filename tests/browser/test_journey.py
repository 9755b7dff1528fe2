"""The whole journey of issue 4 in one browser session: a tenant admin creates an agent with the sliding window
through the form, picks a preset, publishes it, chats with it and sees the reply grow, reloads and sees the
history; a user of the other tenant is refused the conversation."""

import re

import pytest
from django.core.management import call_command

from tests.browser.pages import PASSWORD, log_in
from tests.browser.test_chat import SAMPLER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD)


def test_admin_creates_publishes_and_chats_with_an_agent(asgi_live_server, demo, page_for):
    base = asgi_live_server.url
    page = page_for("en-US")
    log_in(page, base, "energy-admin")

    page.goto(f"{base}/agents/new/")
    page.fill("#id_name", "Journey agent")
    page.fill("#id_description", "Answers in the journey test.")
    page.fill("#id_system_prompt", "You answer briefly.")
    page.check("input[name=overflow_strategy][value=sliding_window]")
    page.select_option("#id_overflow_preset", label="GPT-4 (8K)")
    assert page.input_value("#id_overflow_max_tokens") == "8192"
    with page.expect_navigation():
        page.click("#save-agent")
    page.click("#publish-agent")
    with page.expect_navigation():
        page.click("#confirm-publish")
    assert "v1" in page.locator("#publish-state").inner_text()

    page.goto(f"{base}/chat/")
    page.select_option("#id_agent", label="Journey agent")
    page.click("#new-conversation-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/chat/\d+/$"))
    conversation_url = page.url
    assert page.locator("#strategy-badge").get_attribute("data-strategy") == "sliding_window"

    page.evaluate(SAMPLER)
    page.fill("#chat-input", "hello")
    page.press("#chat-input", "Enter")
    page.wait_for_selector(".chat-assistant .chat-usage", timeout=20_000)
    lengths = page.evaluate("() => { clearInterval(window.__sampler); return window.__lengths; }")
    assert len({length for length in lengths if length > 0}) >= 2, f"the reply did not grow in steps: {lengths}"
    reply = page.locator(".chat-assistant .chat-body").last.inner_text()
    assert "demo model" in reply

    page.reload()
    assert page.locator(".chat-user .chat-body").inner_text() == "hello"
    assert page.locator(".chat-assistant .chat-body").inner_text() == reply

    other = page_for("en-US")
    log_in(other, base, "restaurant-member")
    assert other.goto(conversation_url).status == 404

"""Seed 1's demo in the chat page: the restaurant's waiter takes an order with the offline demo model, showing
tool progress lines (menu, order, checkout), asking for a missing quantity and relaying the sold-out bread."""

import re

import pytest
from django.core.management import call_command

from tests.browser.test_chat import PASSWORD, _log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD)


def _say(page, text: str) -> str:
    replies = page.locator(".chat-assistant .chat-usage")
    before = replies.count()
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('.chat-assistant .chat-usage').length > n", arg=before, timeout=20_000
    )
    return page.locator(".chat-assistant .chat-body").last.inner_text()


def test_the_waiter_takes_an_order_in_the_chat_page(asgi_live_server, demo, page_for):
    base = asgi_live_server.url
    page = page_for("zh-CN")
    _log_in(page, base, "restaurant-member")
    page.goto(f"{base}/chat/")
    waiter = page.locator("#id_agent option", has_text="成都小吃服务员").first.get_attribute("value")
    page.select_option("#id_agent", value=waiter)
    page.click("#new-conversation-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/chat/\d+/$"))

    assert "包子" in _say(page, "你们有什么吃的？")
    assert "几份" in _say(page, "我要包子")
    assert "包子 × 3" in _say(page, "来3个包子")
    assert "售罄" in _say(page, "再来两个面包")
    assert "¥9.00" in _say(page, "结账")
    # Each tool call showed as a progress line in the conversation.
    progress = page.locator(".chat-tool").all_inner_texts()
    assert any("menu" in line for line in progress) and any("checkout" in line for line in progress)

"""Seed 1's demo in the chat page: the restaurant's waiter takes an order with the offline demo model, showing
tool progress lines (menu, order, checkout), asking for a missing quantity and relaying the sold-out bread."""

import pytest
from django.core.management import call_command

from tests.browser.pages import PASSWORD, log_in, say, start_conversation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD)


def test_the_waiter_takes_an_order_in_the_chat_page(asgi_live_server, demo, page_for):
    base = asgi_live_server.url
    page = page_for("zh-CN")
    log_in(page, base, "restaurant-member")
    start_conversation(page, base, "成都小吃服务员")

    assert "包子" in say(page, "你们有什么吃的？")
    assert "几份" in say(page, "我要包子")
    assert "包子 × 3" in say(page, "来3个包子")
    assert "售罄" in say(page, "再来两个面包")
    assert "¥9.00" in say(page, "结账")
    # Each tool call showed as a progress line in the conversation.
    progress = page.locator(".chat-tool").all_inner_texts()
    assert any("menu" in line for line in progress) and any("checkout" in line for line in progress)

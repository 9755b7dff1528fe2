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
    bread = _bubble_lines(page, page.locator(".chat-assistant").last)
    assert "¥9.00" in say(page, "结账")
    # Each tool call showed as one progress line, by its label in the page's language, inside the reply's bubble.
    progress = page.locator(".chat-tool").all_inner_texts()
    assert "工具「菜单查询」已完成" in progress and "工具「结账」已完成" in progress
    assert not any(name in line for line in progress for name in ("menu", "order", "checkout"))
    assert not any("运行中" in line for line in progress)  # a finished call's running line was replaced
    assert page.locator(".chat-log > li.chat-tool").count() == 0
    # The refused bread: the order call failed, once, and a reload tells the same.
    message_id, lines = bread
    assert ("工具「点餐」失败", "failed") in lines and not any(status == "completed" for text, status in lines
                                                            if "点餐" in text)  # fmt: skip
    page.reload()
    assert _bubble_lines(page, page.locator(f'.chat-assistant[data-message-id="{message_id}"]')) == bread
    assert page.locator(".chat-log > li.chat-tool").count() == 0


def _bubble_lines(page, bubble):
    """The reply bubble's id and its progress lines (text, status)."""
    lines = bubble.locator(".chat-tool")
    texts = lines.all_inner_texts()
    return bubble.get_attribute("data-message-id"), [
        (text, lines.nth(i).get_attribute("data-status")) for i, text in enumerate(texts)
    ]


def test_the_orders_changelist_fits_1280px(asgi_live_server, demo, page_for):
    """A newcomer's finding: Admin › 订单 cut its last column at 1280 px (zh-hans dates are long)."""
    base = asgi_live_server.url
    member = page_for("zh-CN")
    log_in(member, base, "restaurant-member")
    start_conversation(member, base, "成都小吃服务员")
    say(member, "来3个包子")
    say(member, "结账")
    page = page_for("zh-CN")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, base, "restaurant-admin")
    page.goto(f"{base}/admin/restaurant/order/")
    assert page.locator("#result_list tbody tr").count() >= 1
    fit = page.evaluate(
        """() => {
        const results = document.querySelector('#changelist .results') || document.querySelector('#result_list');
        const table = document.querySelector('#result_list').getBoundingClientRect();
        return {scroll: results.scrollWidth, client: results.clientWidth, right: table.right,
                page: document.documentElement.clientWidth, wide: document.documentElement.scrollWidth};
    }"""
    )
    assert fit["scroll"] <= fit["client"] and fit["right"] <= fit["page"] and fit["wide"] <= fit["page"], fit

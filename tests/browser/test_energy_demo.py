"""Issue 7 item 8 in the chat page: the energy planner plans the PV report with the offline demo model, its step
cards ask for the location, the answer resumes the plan and the report step's card links to the report."""

import re

import pytest
from django.core.management import call_command

from tests.browser.pages import PASSWORD, log_in, say, start_conversation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD)


def test_the_energy_planner_makes_the_pv_report_in_the_chat_page(asgi_live_server, demo, page_for):
    base = asgi_live_server.url
    page = page_for("zh-CN")
    log_in(page, base, "energy-member")
    start_conversation(page, base, "能源规划师")

    assert say(page, "帮我生成一份光伏经济测算报告", timeout=60_000).endswith(
        "请问项目地点在哪里？是工商业还是户用光伏？"
    )
    cards = page.locator("#chat-plan-steps .chat-step")
    assert cards.count() == 3
    assert cards.nth(0).get_attribute("data-status") == "interrupted"
    assert "请问项目地点在哪里" in cards.nth(0).locator(".chat-step-question").inner_text()
    assert page.locator(".chat-step-log, .chat-plan-log").count() == 0  # a member: no plan log links

    assert "光伏经济测算报告已完成" in say(page, "地点是杭州余杭区，进行工商业光伏测算", timeout=60_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('#chat-plan-steps .chat-step')]"
        ".filter(c => c.dataset.status === 'completed').length === 3",
        timeout=20_000,
    )
    link = cards.nth(2).locator("a.chat-step-link")
    assert "杭州余杭区" in link.inner_text()
    link.click()
    page.wait_for_url(re.compile(r".*/plans/records/[0-9a-f-]+/$"))
    assert "杭州余杭区" in page.locator("article.plan-record").inner_text()

"""Issue 7 item 8 in the chat page: the energy planner plans the PV report with the offline demo model, its step
cards ask for the location, the answer resumes the plan and the report step's card links to the report.

Issue 12 item 8, the plan as a person reads it: the step results read like chat bubbles (the sensitivity table is a
<table>), the resumed step shows its result, not its question, the report link is still there after a reload, the
plan's internal step conversations are not the user's (not listed, not opened), and an admin reaches them from the
plan log."""

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
    _the_cards_read_like_chat_bubbles(cards)
    conversation_url = page.url

    page.reload()
    cards.nth(2).wait_for()
    _the_cards_read_like_chat_bubbles(cards)
    link = cards.nth(2).locator("a.chat-step-link")
    assert "杭州余杭区" in link.inner_text()  # the report link survives the reload
    link.click()
    page.wait_for_url(re.compile(r".*/plans/records/[0-9a-f-]+/$"))
    assert "杭州余杭区" in page.locator("article.plan-record").inner_text()

    # The conversation list is the member's own conversation only: the three step conversations are internal.
    page.goto(f"{base}/chat/")
    listed = page.locator(".chat-list a")
    assert listed.count() == 1 and conversation_url.endswith(listed.first.get_attribute("href"))
    steps = _step_conversations(conversation_url)
    assert len(steps) == 3
    for step in steps:
        assert page.goto(f"{base}/chat/{step.pk}/").status == 404  # nor can the member open one

    # An admin of the tenant reads the plan's log and opens each step's conversation from it.
    admin = page_for("zh-CN")
    log_in(admin, base, "energy-admin")
    admin.goto(conversation_url)
    admin.locator(".chat-plan-log").wait_for()
    admin.goto(base + admin.locator(".chat-plan-log").get_attribute("href"))
    rows = admin.locator("table.plan-steps .plan-step-row")
    assert rows.count() == 3 and rows.nth(1).locator(".plan-status").inner_text() == "已完成"
    hrefs = {rows.nth(i).locator("a.plan-step-conversation").get_attribute("href") for i in range(3)}
    assert hrefs == {f"/chat/{step.pk}/" for step in steps}
    rows.nth(1).locator("a.plan-step-conversation").click()
    admin.wait_for_url(re.compile(r".*/chat/\d+/$"))
    assert "敏感性分析" in admin.locator(".chat-head").inner_text()


def _the_cards_read_like_chat_bubbles(cards):
    # The economics step shows its result, not the question it asked before the plan resumed.
    first = cards.nth(0).locator(".chat-body").inner_text()
    assert "杭州余杭区" in first and "请问项目地点" not in first
    # The sensitivity table is a table in the step card, not Markdown pipes.
    sensitivity = cards.nth(1).locator(".chat-body")
    assert sensitivity.locator("table").count() == 1 and sensitivity.locator("table tr").count() >= 13
    assert "| ---" not in sensitivity.inner_text() and "|---" not in sensitivity.inner_text()


def _step_conversations(conversation_url):
    from memory.models import Conversation
    from tenants.models import Tenant
    from tenants.scope import tenant_scope

    parent_id = int(conversation_url.rstrip("/").rsplit("/", 1)[1])
    with tenant_scope(Tenant.objects.get(slug="energy")):
        return list(Conversation.objects.filter(parent_id=parent_id).order_by("pk"))

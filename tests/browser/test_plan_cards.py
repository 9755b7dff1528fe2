"""The chat page shows a plan as step cards: frames are injected through the chat channel group the way a turn's
sink writes them (chat.sinks.ChannelSink), so the page is tested without the executor."""

import threading

import pytest
from asgiref.sync import async_to_sync

from chat.sinks import ChannelSink
from memory.services import conversation_start
from tenants.scope import tenant_scope
from tests.browser.pages import log_in
from tests.browser.test_chat import demo  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PLAN = {
    "planId": "5f0c2a8e-1d2b-4c3a-9e4f-0a1b2c3d4e5f",
    "userQuery": "Size my PV system",
    "status": "in_progress",
    "steps": [
        {
            "seqNo": 1,
            "agentName": "kb",
            "requirement": "Look up tariffs",
            "status": "in_progress",
            "result": None,
            "depends_on": [],
        },
        {
            "seqNo": 2,
            "agentName": "calc",
            "requirement": "Compute yield",
            "status": "not_started",
            "result": None,
            "depends_on": [1],
        },
    ],
    "context": {},
}


def test_plan_frames_build_and_fill_the_step_cards(asgi_live_server, demo, page_for):  # noqa: F811
    from django.contrib.auth import get_user_model

    from agents.models import Agent

    user = get_user_model().objects.get(username="energy-admin")
    with tenant_scope(demo):
        conversation = conversation_start(agent=Agent.objects.order_by("-pk").first(), user=user)
    page = page_for("en-US")
    log_in(page, asgi_live_server.url, "energy-admin")
    page.goto(f"{asgi_live_server.url}/chat/{conversation.pk}/")
    page.wait_for_function("() => !document.getElementById('chat-status').textContent")
    sink = ChannelSink(conversation.pk)

    def emit(frame):
        # Playwright's sync API runs an event loop in this thread: emit from another, as a turn's worker does.
        thread = threading.Thread(target=async_to_sync(sink.emit), args=(frame,))
        thread.start()
        thread.join(10)

    emit({"type": "plan", "plan": PLAN})
    cards = page.locator("#chat-plan-steps .chat-step")
    cards.nth(1).wait_for()
    assert cards.nth(0).locator(".chat-step-agent").inner_text() == "kb"
    assert "after step 1" in cards.nth(1).locator(".chat-step-after").inner_text()
    # An admin of the tenant gets the plan's log link and one per step, built for the plan the frame named.
    log = f"/plans/{PLAN['planId']}/log/"
    assert page.locator(".chat-plan-log").get_attribute("href") == log
    assert cards.nth(1).locator("a.chat-step-log").get_attribute("href") == log + "?step=2"

    emit({"type": "delta", "index": 2, "content": "<b>yield</b> "})
    emit({"type": "delta", "index": 1, "content": "tariff text"})
    page.wait_for_function(
        "() => document.querySelector('.chat-step[data-index=\"1\"] .chat-body').textContent === 'tariff text'"
    )
    assert cards.nth(1).locator(".chat-body").inner_text().startswith("<b>yield</b>")

    emit(
        {
            "type": "step",
            "index": 2,
            "status": "completed",
            "agentChatResponse": {"content": "done", "intent": "pv", "data": [{"month": "Jan", "kwh": 120}]},
        }
    )
    page.wait_for_selector('.chat-step[data-index="2"] table.chat-step-table')
    assert cards.nth(1).locator("td").first.inner_text() == "Jan"
    assert cards.nth(1).get_attribute("data-status") == "completed"

    emit(
        {
            "type": "step",
            "index": 1,
            "status": "completed",
            "agentChatResponse": {
                "content": "",
                "intent": "report",
                "data": {"recordId": 7, "url": "/files/7/", "title": "Report.pdf"},
            },
        }
    )
    link = page.locator('.chat-step[data-index="1"] a.chat-step-link')
    link.wait_for()
    assert link.inner_text() == "Report.pdf"

    steps = [
        dict(PLAN["steps"][0], status="completed"),
        dict(PLAN["steps"][1], status="interrupted", result={"content": "Which roof orientation?"}),
    ]
    emit({"type": "plan", "plan": dict(PLAN, steps=steps)})
    page.wait_for_selector('.chat-step[data-index="2"][data-status="interrupted"] .chat-step-question')
    question = cards.nth(1).locator(".chat-step-question").inner_text()
    assert "The plan is waiting for your answer" in question and "Which roof orientation?" in question

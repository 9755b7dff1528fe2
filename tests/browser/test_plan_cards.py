"""The chat page shows a plan as step cards: frames are injected through the chat channel group the way a turn's
sink writes them (engine.sinks.ChannelSink), so the page is tested without the executor."""

import threading

import pytest
from asgiref.sync import async_to_sync

from agents import frames
from agents.services import conversation_start
from engine.sinks import ChannelSink
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


def _emitter(sink):
    """emit(frame): the frame written through `sink` and logged (its deltas are not held back for a batch)."""

    async def emit_logged(frame):
        await sink.emit(frame)
        await sink.flush()

    def emit(frame):
        # Playwright's sync API runs an event loop in this thread: emit from another, as a turn's worker does.
        thread = threading.Thread(target=async_to_sync(emit_logged), args=(frame,))
        thread.start()
        thread.join(10)

    return emit


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
    emit = _emitter(ChannelSink(conversation.pk))
    emit(frames.Plan(plan=PLAN))
    cards = page.locator("#chat-plan-steps .chat-step")
    cards.nth(1).wait_for()
    assert cards.nth(0).locator(".chat-step-agent").inner_text() == "kb"
    assert "after step 1" in cards.nth(1).locator(".chat-step-after").inner_text()
    # An admin of the tenant gets the plan's log link and one per step, built for the plan the frame named.
    log = f"/plans/{PLAN['planId']}/log/"
    assert page.locator(".chat-plan-log").get_attribute("href") == log
    assert cards.nth(1).locator("a.chat-step-log").get_attribute("href") == log + "?step=2"

    emit(frames.Delta(index=2, content="<b>yield</b> "))
    emit(frames.Delta(index=1, content="tariff text"))
    page.wait_for_function(
        "() => document.querySelector('.chat-step[data-index=\"1\"] .chat-body')?.textContent === 'tariff text'"
    )
    assert cards.nth(1).locator(".chat-body").inner_text().startswith("<b>yield</b>")

    emit(
        frames.Step(
            index=2,
            status="completed",
            agentChatResponse={"content": "done", "intent": "pv", "data": [{"month": "Jan", "kwh": 120}]},
        )
    )
    page.wait_for_selector('.chat-step[data-index="2"] table.chat-step-table')
    assert cards.nth(1).locator("td").first.inner_text() == "Jan"
    assert cards.nth(1).get_attribute("data-status") == "completed"

    emit(
        frames.Step(
            index=1,
            status="completed",
            agentChatResponse={
                "content": "",
                "intent": "report",
                "data": {"recordId": 7, "url": "/files/7/", "title": "Report.pdf"},
            },
        )
    )
    link = page.locator('.chat-step[data-index="1"] a.chat-step-link')
    link.wait_for()
    assert link.inner_text() == "Report.pdf"

    steps = [
        dict(PLAN["steps"][0], status="completed"),
        dict(PLAN["steps"][1], status="interrupted", result={"content": "Which roof orientation?"}),
    ]
    emit(frames.Plan(plan=dict(PLAN, steps=steps)))
    page.wait_for_selector('.chat-step[data-index="2"][data-status="interrupted"] .chat-step-question')
    question = cards.nth(1).locator(".chat-step-question").inner_text()
    assert "The plan is waiting for your answer" in question and "Which roof orientation?" in question


QUESTION = "请问项目地点在哪里？是工商业还是户用光伏？"
TABLE = "敏感性分析：\n\n| 因素 | 变化 | IRR |\n| --- | --- | --- |\n| 电价 | -20% | 17.38% |"


class _SinkBeforeRenderedSteps(ChannelSink):
    """Frames as a sink wrote them before step frames carried `html`: the card must fall back to the text."""

    def render(self, frame):
        data = super().render(frame)
        data.pop("html", None) if data.get("type") == "step" else None
        return data


def test_a_resumed_step_shows_its_new_run_not_the_question_before_it(asgi_live_server, demo, page_for):  # noqa: F811
    """The interrupted run asked (its deltas and its question), the plan resumed with the step still holding that
    result: the new run's card shows only the new run, and its step frame's rendering (a real <table>) replaces the
    deltas; a step frame without `html` replaces them with its whole text instead of appending it."""
    from django.contrib.auth import get_user_model

    from agents.models import Agent

    user = get_user_model().objects.get(username="energy-member")
    with tenant_scope(demo):
        conversation = conversation_start(agent=Agent.objects.order_by("-pk").first(), user=user)
    page = page_for("zh-CN")
    log_in(page, asgi_live_server.url, "energy-member")
    page.goto(f"{asgi_live_server.url}/chat/{conversation.pk}/")
    page.wait_for_function("() => !document.getElementById('chat-status').textContent")

    emit, emit_plain = _emitter(ChannelSink(conversation.pk)), _emitter(_SinkBeforeRenderedSteps(conversation.pk))
    asked = {"recordId": "r1", "output": QUESTION, "status": "interrupted", "context": {}}

    def plan(status1, result1=None, status2="not_started"):
        steps = [dict(PLAN["steps"][0], status=status1, result=result1), dict(PLAN["steps"][1], status=status2)]
        return frames.Plan(plan=dict(PLAN, steps=steps))

    body = page.locator('.chat-step[data-index="1"] .chat-body')
    emit(plan("in_progress"))
    emit(frames.Tool(index=1, name="ask_project", status="interrupted"))
    emit(frames.Delta(index=1, content=QUESTION))
    page.wait_for_function("q => document.querySelector('.chat-step[data-index=\"1\"] .chat-body')?.textContent === q",
                           arg=QUESTION)  # fmt: skip
    emit(frames.Step.response(index=1, status="interrupted", content=QUESTION, intent="plan_step", data=asked))
    emit(plan("interrupted", asked))
    page.wait_for_selector('.chat-step[data-index="1"][data-status="interrupted"] .chat-step-question')
    assert body.inner_text() == ""  # the question is in the question box, not the result
    assert page.locator('.chat-step[data-index="1"] .chat-tool').count() == 1

    # The user answered: the plan resumes; the step still holds the question until its new run ends.
    emit(plan("not_started", asked))
    emit(plan("in_progress", asked))
    emit(frames.Delta(index=1, content="**光伏经济性测算**"))
    page.wait_for_function("() => document.querySelector('.chat-step[data-index=\"1\"] .chat-body')?.textContent"
                           ".includes('光伏经济性测算')")  # fmt: skip
    assert body.inner_text() == "**光伏经济性测算**"
    assert page.locator('.chat-step[data-index="1"] .chat-tool').count() == 0  # the first run's tool lines went
    assert page.locator('.chat-step[data-index="1"] .chat-step-question').is_hidden()

    done = {"recordId": "r2", "output": TABLE, "status": "completed", "context": {}}
    emit(frames.Step.response(index=1, status="completed", content=TABLE, intent="plan_step", data=done))
    page.wait_for_selector('.chat-step[data-index="1"] .chat-body table')
    assert "| ---" not in body.inner_text() and QUESTION not in body.inner_text()
    assert body.locator("td").first.inner_text() == "电价"
    emit(plan("completed", done, status2="in_progress"))
    assert body.locator("table").count() == 1  # the plan frame after it keeps the rendering

    emit(frames.Delta(index=2, content="partial "))
    emit_plain(frames.Step.response(index=2, status="completed", content="partial and whole", intent="plan_step"))
    page.wait_for_selector('.chat-step[data-index="2"][data-status="completed"]')
    assert page.locator('.chat-step[data-index="2"] .chat-body').inner_text() == "partial and whole"

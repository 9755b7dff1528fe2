"""The chat page's plan panel: the container and its translated labels are rendered; a stored plan shows as cards on
reload (when the plans app is there); the card builder reads seed 0's ExecutionPlan field names."""

import pytest
from django.urls import reverse

from chat import selectors
from tests.chat.test_views import _agent, _conversation

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"


def test_the_page_renders_an_empty_plan_panel_with_its_labels(login, member, tenant):
    conversation = _conversation(tenant, member, _agent(tenant))
    client = login(member)
    response = client.get(reverse("chat:conversation", args=[conversation.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="chat-plan"' in html and 'id="chat-plan-steps"' in html
    assert 'data-label-waiting="The plan is waiting for your answer"' in html
    assert 'data-label-after="after step %(steps)s"' in html
    labels = response.context["chat_labels"]
    assert labels["stepStatus"]["interrupted"] == "interrupted"


def test_the_labels_follow_the_language(login, member, tenant):
    conversation = _conversation(tenant, member, _agent(tenant))
    client = login(member)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    html = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert 'id="chat-plan"' in html  # the labels come from {% translate %}: the zh-hans catalogue fills them


def test_cards_from_an_execution_plan():
    plan = {
        "planId": "p1",
        "steps": [
            {
                "seqNo": 2,
                "agentName": "calc",
                "requirement": "Compute",
                "status": "completed",
                "depends_on": [1],
                "result": {"content": "done", "intent": "pv", "data": {"columns": ["a", "b"], "rows": [[1, 2]]}},
            },
            {
                "seqNo": 1,
                "agentName": "kb",
                "requirement": "Look up",
                "status": "interrupted",
                "depends_on": [],
                "result": {"content": "Which roof?"},
            },
            {
                "seqNo": 3,
                "agentName": "report",
                "requirement": "Write",
                "status": "completed",
                "depends_on": [1, 2],
                "result": {"data": {"recordId": 9, "url": "/files/9/", "title": "Report.pdf"}},
            },
            {
                "seqNo": 4,
                "agentName": "x",
                "requirement": "",
                "status": "completed",
                "depends_on": [],
                "result": {"data": {"recordId": 1, "url": "javascript:alert(1)", "title": "bad"}},
            },
            {
                "seqNo": 5,
                "agentName": "y",
                "requirement": "",
                "status": "completed",
                "depends_on": [],
                "result": {"data": [{"k": 1}, {"k": 2, "v": "x"}]},
            },
        ],
    }
    cards = selectors.plan_cards(plan)
    assert [card.index for card in cards] == [1, 2, 3, 4, 5]
    assert cards[0].status_label == "interrupted" and cards[0].content == "Which roof?"
    assert cards[1].columns == ["a", "b"] and cards[1].rows == [["1", "2"]] and cards[1].depends_on == [1]
    assert cards[2].link == {"url": "/files/9/", "title": "Report.pdf"}
    assert cards[3].link is None
    assert cards[4].columns == ["k", "v"] and cards[4].rows == [["1", ""], ["2", "x"]]


def test_with_the_plans_app_a_conversation_without_a_plan_has_an_empty_panel(login, member, tenant):
    conversation = _conversation(tenant, member, _agent(tenant))
    response = login(member).get(reverse("chat:conversation", args=[conversation.pk]))
    assert response.status_code == 200
    assert response.context["plan"] is None


def test_a_stored_plan_renders_as_cards_on_reload(login, member, tenant):
    from tests.plans.test_plan_admin import make_plan

    plan = make_plan(tenant, "Solar", user=member)
    response = login(member).get(reverse("chat:conversation", args=[plan.conversation_id]))
    assert response.status_code == 200
    shown = response.context["plan"]
    assert shown["plan_id"] == str(plan.planId)
    assert [(card.index, card.status) for card in shown["cards"]] == [(0, "completed"), (1, "not_started")]
    assert shown["cards"][0].content == "Solar output" and shown["cards"][1].depends_on == [0]
    html = response.content.decode()
    assert "Solar first requirement" in html and "Solar output" in html


def test_another_tenants_plan_never_shows(login, member, tenant, other_tenant):
    from tests.plans.test_plan_admin import make_plan

    theirs = make_plan(other_tenant, "Noodle")
    mine = _conversation(tenant, member, _agent(tenant))
    client = login(member)
    page = client.get(reverse("chat:conversation", args=[mine.pk]))
    assert page.context["plan"] is None and "Noodle" not in page.content.decode()
    response = client.get(reverse("chat:conversation", args=[theirs.conversation_id]))
    assert response.status_code == 404
    assert "Noodle first requirement" not in response.content.decode()


def test_a_step_result_renders_as_markdown_and_a_stored_report_keeps_its_link():
    table = "| 年份 | 收益 |\n| --- | --- |\n| 1 | 83936.6 |"
    stored = {"recordId": "r-1", "output": table, "status": "completed", "context": {},
              "url": "/plans/records/r-1/", "title": "光伏经济性测算报告"}  # fmt: skip
    plan = {"steps": [{"seqNo": 3, "agentName": "报告", "status": "completed", "result": stored}]}
    (card,) = selectors.plan_cards(plan)
    assert "<table>" in card.html and "| --- |" not in card.html
    assert card.link == {"url": "/plans/records/r-1/", "title": "光伏经济性测算报告"}
    unsafe = selectors.plan_cards(
        {"steps": [{"seqNo": 1, "status": "completed", "result": {"output": "<script>x()</script>**ok**"}}]}
    )
    assert "<script>" not in unsafe[0].html and "<strong>ok</strong>" in unsafe[0].html


def test_the_live_step_frame_carries_the_rendered_result():
    from agents import frames
    from engine.sinks import page_frame

    step = frames.Step.response(index=2, status="completed", content="| a |\n| - |\n| 1 |", intent="plan_step")
    sent = page_frame(step).as_dict()
    assert sent["type"] == "step" and "<table>" in sent["html"] and sent["agentChatResponse"]["content"].startswith("|")
    done = page_frame(frames.Done(message_id=1, status="complete", usage=frames.usage_dict(), content="**hi**"))
    assert "content" not in done.as_dict() and done.as_dict()["html"] == "<p><strong>hi</strong></p>"


def test_plan_step_conversations_stay_out_of_the_list(login, member, tenant):
    from agents.services import conversation_start
    from tenants.scope import tenant_scope

    agent = _agent(tenant)
    own = _conversation(tenant, member, agent)
    with tenant_scope(tenant):
        step = conversation_start(agent=agent, user=member, parent=own)
        assert selectors.conversation_list(user=member) == [own]
    client = login(member)
    page = client.get(reverse("chat:list")).content.decode()
    assert f"/chat/{own.pk}/" in page and f"/chat/{step.pk}/" not in page
    assert client.get(reverse("chat:conversation", args=[step.pk])).status_code == 404


def test_a_step_that_has_not_run_again_shows_no_result_of_its_earlier_run():
    asked = {"recordId": "r", "output": "请问项目地点在哪里？", "status": "interrupted", "context": {}}
    report = {"recordId": "r2", "output": "old", "url": "/plans/records/r2/", "title": "Old report"}
    steps = [
        {"seqNo": 1, "status": "interrupted", "result": asked},
        {"seqNo": 2, "status": "not_started", "result": asked},  # the plan resumed: the step runs again
        {"seqNo": 3, "status": "in_progress", "result": report},
    ]
    interrupted, resumed, running = selectors.plan_cards({"steps": steps})
    assert interrupted.content == "请问项目地点在哪里？" and interrupted.html == ""  # the question box shows it
    assert (resumed.content, resumed.html, resumed.link) == ("", "", None)
    assert (running.content, running.html, running.link) == ("", "", None)


def test_the_reloaded_page_shows_the_result_as_markdown_and_the_report_link(login, member, tenant):
    from plans import services
    from tenants.scope import tenant_scope
    from tests.plans.test_plan_admin import make_plan

    plan = make_plan(tenant, "Solar", user=member)
    output = "| 因素 | IRR |\n| --- | --- |\n| 电价 | 17.38% |\n\n<script>alert(1)</script>"
    stored = {"recordId": "r-3", "output": output, "status": "completed", "context": {},
              "url": "/plans/records/r-3/", "title": "光伏报告"}  # fmt: skip
    with tenant_scope(tenant):
        services.step_update(step=plan.steps.get(seqNo=1), status="completed", result=stored)
    page = login(member).get(reverse("chat:conversation", args=[plan.conversation_id])).content.decode()
    card = page[page.index('<section class="chat-step" data-index="1"') :]
    card = card[: card.index("</section>")]
    assert '<div class="chat-body chat-md"><table>' in card and "<td>电价</td>" in card and "| ---" not in card
    assert "<script>" not in page.split('id="chat-plan"', 1)[1].split("</section>")[0]
    assert '<a class="chat-step-link" href="/plans/records/r-3/">光伏报告</a>' in card

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


@pytest.mark.skipif(selectors.Plan is None, reason="plans.models is not there yet")
def test_with_the_plans_app_a_conversation_without_a_plan_has_an_empty_panel(login, member, tenant):
    conversation = _conversation(tenant, member, _agent(tenant))
    response = login(member).get(reverse("chat:conversation", args=[conversation.pk]))
    assert response.status_code == 200
    assert response.context["plan"] is None


@pytest.mark.skipif(selectors.Plan is None, reason="plans.models is not there yet")
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


@pytest.mark.skipif(selectors.Plan is None, reason="plans.models is not there yet")
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

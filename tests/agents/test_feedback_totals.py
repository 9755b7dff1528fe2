"""Issue 36: the agent's page shows its replies' thumbs up and down, all in all and per published version (docs/embed.md
said so; they were only in the admin), as drawn icons and numbers. Like the page's metrics, every member of the
tenant sees them; only this tenant's rows count, and another tenant's agent page is refused."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.services import agent_create, agent_publish, agent_update, conversation_start
from memory.feedback import feedback_record
from memory.models import Feedback
from memory.services import assistant_message_finish, message_add
from tenants.scope import all_tenants, tenant_scope
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

EN = {"HTTP_ACCEPT_LANGUAGE": "en"}
EMOJI = re.compile("[\U0001f300-\U0001faff]")


def _reply(agent, user, *, draft: bool = False):
    conversation = conversation_start(agent=agent, user=user, draft=draft)
    message_add(conversation=conversation, role="user", content="Which way?")
    return assistant_message_finish(conversation=conversation, content="South.")


def _rate(agent, ratings, *, draft: bool = False) -> None:
    """One reply per rating, each rated by its own member (+1 or -1)."""
    for rating in ratings:
        user = UserFactory()
        MembershipFactory(tenant=agent.tenant, user=user)
        feedback_record(message=_reply(agent, user, draft=draft), user=user, rating=rating, source="chat")


def _totals(page: str) -> tuple[int, int]:
    panel = page.split('id="feedback-totals"')[1].split("</ul>")[0]
    up = re.search(r'data-feedback="up">(\d+)<', panel).group(1)
    down = re.search(r'data-feedback="down">(\d+)<', panel).group(1)
    return int(up), int(down)


def _version_counts(page: str, number: int) -> tuple[int, int]:
    row = page.split(f'<tr data-version="{number}">')[1].split("</tr>")[0]
    up = re.search(r'data-count="up">(\d+)<', row).group(1)
    down = re.search(r'data-count="down">(\d+)<', row).group(1)
    return int(up), int(down)


@pytest.fixture
def rated_agent(tenant):
    """Version 1: 2 up, 1 down; version 2: 1 up, 2 down; a test conversation of the draft: 1 down."""
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Solar advisor", system_prompt="You advise.", model="gpt-4")
        agent_publish(agent=agent, user=None)
        _rate(agent, [1, 1, -1])
        agent_update(agent=agent, name=agent.name, system_prompt="You advise briefly.")
        agent_publish(agent=agent, user=None)
        _rate(agent, [1, -1, -1])
        _rate(agent, [-1], draft=True)
    return agent


def test_the_agent_page_shows_the_totals_and_each_versions(login, member, tenant, rated_agent):
    page = login(member, tenant).get(reverse("agents:detail", args=[rated_agent.pk]), **EN).content.decode()
    assert "<h2>Feedback</h2>" in page and "<th>Feedback</th>" in page
    assert _totals(page) == (3, 4)  # every rating, the draft's test conversation's too
    assert _version_counts(page, 1) == (2, 1)
    assert _version_counts(page, 2) == (1, 2)
    draft = page.split('id="feedback-draft"')[1].split("</p>")[0]
    assert "Test (draft)" in draft
    assert re.search(r'data-count="up">0<', draft) and re.search(r'data-count="down">1<', draft)
    # Drawn icons with words for screen readers, no emoji.
    panel = page.split('id="feedback-totals"')[1].split("</ul>")[0]
    assert panel.count("<svg") == 2 and "thumbs up" in panel and "thumbs down" in panel
    row = page.split('<tr data-version="1">')[1].split("</tr>")[0]
    assert row.count("<svg") == 2 and 'class="visually-hidden">thumbs up<' in row
    assert not EMOJI.search(page)


def test_the_words_are_chinese_on_a_chinese_page(login, member, tenant, rated_agent):
    page = login(member, tenant).get(reverse("agents:detail", args=[rated_agent.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans")
    panel = page.content.decode().split('id="feedback-totals"')[1].split("</ul>")[0]
    assert "赞" in panel and "踩" in panel
    assert "<h2>反馈</h2>" in page.content.decode() and "测试（草稿）" in page.content.decode()


def test_an_agent_without_ratings_shows_zeros(login, member, tenant):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Quiet", system_prompt="You advise.", model="gpt-4")
        agent_publish(agent=agent, user=None)
    page = login(member, tenant).get(reverse("agents:detail", args=[agent.pk]), **EN).content.decode()
    assert _totals(page) == (0, 0) and _version_counts(page, 1) == (0, 0)
    assert 'id="feedback-draft"' not in page


def test_only_this_tenants_feedback_counts(login, member, tenant, other_tenant, rated_agent):
    with tenant_scope(other_tenant):
        theirs = agent_create(tenant=other_tenant, name="Solar advisor", system_prompt="Theirs.", model="gpt-4")
        agent_publish(agent=theirs, user=None)
        _rate(theirs, [1, 1, 1, -1])
    # A stray row of the other tenant that points at one of this agent's replies (as a bad import could make): the
    # page counts this tenant's rows only.
    with tenant_scope(tenant):
        mine = Feedback.objects.filter(message__conversation__agent=rated_agent).first().message
    with all_tenants(reason="a test plants another tenant's row"):
        stranger = UserFactory()
        Feedback.objects.create(tenant=other_tenant, message=mine, user=stranger, rating=1, source="api")
    page = login(member, tenant).get(reverse("agents:detail", args=[rated_agent.pk]), **EN).content.decode()
    assert _totals(page) == (3, 4)
    assert _version_counts(page, 1) == (2, 1) and _version_counts(page, 2) == (1, 2)


def test_another_tenants_agent_page_is_refused(login, tenant_admin, member, tenant, other_tenant):
    with tenant_scope(other_tenant):
        theirs = agent_create(tenant=other_tenant, name="Theirs", system_prompt="Theirs.", model="gpt-4")
        agent_publish(agent=theirs, user=None)
        _rate(theirs, [1, -1])
    for user in (tenant_admin, member):
        response = login(user, tenant).get(reverse("agents:detail", args=[theirs.pk]), **EN)
        assert response.status_code == 404


def test_the_counts_cost_one_query(login, member, tenant, rated_agent, django_assert_max_num_queries):
    client = login(member, tenant)
    client.get(reverse("agents:detail", args=[rated_agent.pk]))  # warm the session and caches
    with django_assert_max_num_queries(30) as counted:
        client.get(reverse("agents:detail", args=[rated_agent.pk]), **EN)
    feedback_queries = [q["sql"] for q in counted.captured_queries if "memory_feedback" in q["sql"]]
    assert len(feedback_queries) == 1, feedback_queries

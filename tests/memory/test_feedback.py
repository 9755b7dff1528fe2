"""Feedback on replies from each surface (chat page, widget, API): recorded once per rater (re-rating replaces),
sent as memory.signals.feedback_given with its source, refused for another tenant's, member's or visitor's message,
and counted per agent and version in the admin."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.services import agent_create, agent_publish, conversation_start
from api.keys import key_create
from api.models import KeyScope
from memory.models import Feedback
from memory.services import message_add
from memory.signals import feedback_given
from tenants.scope import tenant_scope
from tests.widget.helpers import make_embed, new_visitor, ticket_for, visitor_conversation_start

pytestmark = pytest.mark.django_db


@pytest.fixture
def signals():
    received = []

    def listener(sender, **kwargs):
        received.append({"sender": sender, **kwargs})

    feedback_given.connect(listener)
    yield received
    feedback_given.disconnect(listener)


def _exchange(tenant, user, agent=None, **start):
    with tenant_scope(tenant):
        agent = agent or agent_create(tenant=tenant, name=f"Advisor {tenant.pk}", system_prompt="You advise.")
        if agent.published_version() is None:
            agent_publish(agent=agent, user=None)
        conversation = conversation_start(agent=agent, user=user, **start)
        question = message_add(conversation=conversation, role="user", content="Which way?")
        reply = message_add(conversation=conversation, role="assistant", content="South.")
        return conversation, question, reply


def _logged_in(user, tenant) -> Client:
    client = Client()
    client.force_login(user)
    session = client.session
    session["active_tenant_id"] = tenant.pk
    session.save()
    return client


def _feedback(tenant):
    with tenant_scope(tenant):
        return list(Feedback.objects.values("message_id", "user_id", "rating", "comment", "source"))


def test_the_chat_page_records_and_replaces_a_rating(tenant, member, signals):
    _conversation, question, reply = _exchange(tenant, member)
    client = _logged_in(member, tenant)
    url = f"/chat/messages/{reply.pk}/feedback/"
    assert client.post(url, {"rating": "up"}, content_type="application/json").status_code == 200
    response = client.post(url, {"rating": -1, "comment": "Too short."}, content_type="application/json")
    assert response.status_code == 200 and response.json()["rating"] == -1
    assert _feedback(tenant) == [
        {"message_id": reply.pk, "user_id": member.pk, "rating": -1, "comment": "Too short.", "source": "chat"}
    ]
    assert [(s["rating"], s["source"], s["message"].pk) for s in signals] == [(1, "chat", reply.pk),
                                                                             (-1, "chat", reply.pk)]  # fmt: skip
    # Not a reply, not a rating: refused, nothing stored.
    assert client.post(f"/chat/messages/{question.pk}/feedback/", {"rating": 1}).status_code == 400
    assert client.post(url, {"rating": 5}).status_code == 400
    assert len(signals) == 2


def test_the_chat_page_refuses_another_members_and_another_tenants_message(
    tenant, member, tenant_admin, other_tenant, other_tenant_admin, signals
):
    _c, _q, own_admin_reply = _exchange(tenant, tenant_admin)
    _c, _q, foreign_reply = _exchange(other_tenant, other_tenant_admin)
    client = _logged_in(member, tenant)
    for reply in (own_admin_reply, foreign_reply):
        assert client.post(f"/chat/messages/{reply.pk}/feedback/", {"rating": 1}).status_code == 404
    assert _feedback(tenant) == [] and _feedback(other_tenant) == [] and signals == []


def test_the_conversation_page_offers_feedback_on_ones_own_replies(tenant, member):
    conversation, _q, _r = _exchange(tenant, member)
    page = _logged_in(member, tenant).get(f"/chat/{conversation.pk}/").content.decode()
    assert '"feedbackUrl": "/chat/messages/0/feedback/"' in page and '"csrfToken": "' in page


def test_the_api_records_feedback_and_refuses_another_conversations_message(
    tenant, member, other_tenant, other_tenant_admin, signals
):
    conversation, _q, reply = _exchange(tenant, member, source="api")
    other_conversation, _q, other_reply = _exchange(tenant, member, agent=conversation.agent)
    with tenant_scope(tenant):
        _key, secret = key_create(tenant=tenant, user=member, name="k", scopes=[KeyScope.CHAT, KeyScope.READ])
    api = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    url = f"/api/v1/conversations/{conversation.pk}/messages/{reply.pk}/feedback/"
    response = api.post(url, {"rating": 1, "comment": "Clear."}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json() == {"message_id": reply.pk, "rating": 1, "comment": "Clear."}
    # A message of another conversation through this one, another tenant's conversation, a bad rating.
    wrong = f"/api/v1/conversations/{conversation.pk}/messages/{other_reply.pk}/feedback/"
    assert api.post(wrong, {"rating": 1}, content_type="application/json").status_code == 404
    _fc, _fq, foreign = _exchange(other_tenant, other_tenant_admin)
    foreign_url = f"/api/v1/conversations/{foreign.conversation_id}/messages/{foreign.pk}/feedback/"
    assert api.post(foreign_url, {"rating": 1}, content_type="application/json").status_code == 404
    assert api.post(url, {"rating": 3}, content_type="application/json").status_code == 400
    assert [(s["source"], s["comment"]) for s in signals] == [("api", "Clear.")]
    assert other_conversation.source == "chat" and conversation.source == "api"


def test_the_api_documents_feedback(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    path = "/api/v1/conversations/{id}/messages/{message_id}/feedback/"
    assert path in schema["paths"] and "post" in schema["paths"][path]


def test_the_widget_records_a_visitors_feedback_and_refuses_another_visitors(tenant, scripted_llm, signals):
    embed = make_embed(tenant, scripted_llm.base_url)
    client = Client()
    ticket = ticket_for(client, embed)
    first, second = new_visitor(), new_visitor()
    conversation = visitor_conversation_start(embed, first, "Hi")
    with tenant_scope(tenant):
        reply = message_add(conversation=conversation, role="assistant", content="Hello!")
    url = f"/embed/{embed.token}/messages/{reply.pk}/feedback/"
    body = {"ticket": ticket, "visitor": first, "rating": "up", "comment": "Nice"}
    assert client.post(url, body, content_type="application/json").status_code == 200
    assert client.post(url, {**body, "visitor": second}, content_type="application/json").status_code == 404
    assert client.post(url, {**body, "ticket": "forged"}, content_type="application/json").status_code == 403
    assert [(s["source"], s["rating"]) for s in signals] == [("widget", 1)]
    assert _feedback(tenant)[0]["user_id"] == conversation.user_id


def test_the_admin_counts_feedback_per_agent_and_version(tenant, member, tenant_admin):
    conversation, _q, reply = _exchange(tenant, member)
    _c, _q2, reply2 = _exchange(tenant, member, agent=conversation.agent)
    client = _logged_in(member, tenant)
    client.post(f"/chat/messages/{reply.pk}/feedback/", {"rating": 1})
    client.post(f"/chat/messages/{reply2.pk}/feedback/", {"rating": -1})
    admin = _logged_in(tenant_admin, tenant)
    listing = admin.get("/admin/agents/agent/").content.decode()
    assert "1 / 1" in listing
    page = admin.get(f"/admin/agents/agent/{conversation.agent_id}/change/").content.decode()
    assert page.count("1 / 1") >= 2  # the agent's total and its version 1
    conversations = admin.get("/admin/memory/conversation/?source__exact=chat").content.decode()
    assert "chat page" in conversations or "聊天页面" in conversations


def test_the_agent_list_reads_feedback_counts_in_one_query_whatever_the_number_of_agents(tenant, member, tenant_admin):
    admin = _logged_in(tenant_admin, tenant)
    rater = _logged_in(member, tenant)

    def listing_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin.get("/admin/agents/agent/").status_code == 200
        return len(queries)

    _c, _q, reply = _exchange(tenant, member)
    rater.post(f"/chat/messages/{reply.pk}/feedback/", {"rating": 1})
    one_agent = listing_queries()
    for number in range(3):
        with tenant_scope(tenant):
            agent = agent_create(tenant=tenant, name=f"Advisor no. {number}", system_prompt="You advise.")
        _c, _q, reply = _exchange(tenant, member, agent=agent)
        rater.post(f"/chat/messages/{reply.pk}/feedback/", {"rating": -1})
    listing = admin.get("/admin/agents/agent/").content.decode()
    assert listing.count("0 / 1") == 3 and listing.count("1 / 0") == 1
    assert listing_queries() == one_agent

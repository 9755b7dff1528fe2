"""Feedback comments the database cannot store (issue 34: a NUL or a lone surrogate, sent as JSON's \\u0000 or \\ud800,
in the widget's anonymous feedback answered 500). The widget's feedback and the chat page's answer 400 with the
reason in the visitor's language, and store nothing; a body nested too deep to read is no 500 either."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.services import agent_create, agent_publish, conversation_start
from memory.models import Feedback
from memory.services import message_add
from memory.signals import feedback_given
from tenants.scope import tenant_scope
from tests.widget.helpers import make_embed, new_visitor, ticket_for, visitor_conversation_start

pytestmark = pytest.mark.django_db

ESCAPES = pytest.mark.parametrize("escape", ["\\u0000", "\\ud800"], ids=["nul", "surrogate"])
WORDS = {"en": "cannot be stored", "zh-hans": "无法保存"}


@pytest.fixture
def signals():
    received = []

    def listener(sender, **kwargs):
        received.append(kwargs)

    feedback_given.connect(listener)
    yield received
    feedback_given.disconnect(listener)


@pytest.fixture
def embed(tenant, scripted_llm):
    return make_embed(tenant, scripted_llm.base_url)


def _visitors_reply(embed, visitor: str):
    conversation = visitor_conversation_start(embed, visitor, "Hi")
    with tenant_scope(embed.tenant):
        return message_add(conversation=conversation, role="assistant", content="Hello!")


def _members_reply(tenant, user):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name=f"Advisor {tenant.pk}", system_prompt="You advise.")
        agent_publish(agent=agent, user=None)
        conversation = conversation_start(agent=agent, user=user)
        message_add(conversation=conversation, role="user", content="Which way?")
        return message_add(conversation=conversation, role="assistant", content="South.")


def _logged_in(user, tenant) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en", raise_request_exception=False)
    client.force_login(user)
    session = client.session
    session["active_tenant_id"] = tenant.pk
    session.save()
    return client


def _stored(tenant) -> int:
    with tenant_scope(tenant):
        return Feedback.objects.count()


def _json_with(fields: dict, escape: str) -> bytes:
    """The fields as JSON with `escape` written into the comment as it is (json.dumps would escape the backslash)."""
    return json.dumps({**fields, "comment": "bad <here> comment"}).replace("<here>", escape).encode()


@ESCAPES
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_widget_refuses_a_comment_it_cannot_store_with_400(embed, signals, escape, language):
    client = Client(raise_request_exception=False)
    ticket, visitor = ticket_for(client, embed, lang=language), new_visitor()
    reply = _visitors_reply(embed, visitor)
    url = f"/embed/{embed.token}/messages/{reply.pk}/feedback/"
    body = _json_with({"ticket": ticket, "visitor": visitor, "rating": "up"}, escape)
    response = client.post(url, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert WORDS[language] in response.json()["error"] and "comment" in response.json()["error"]
    assert _stored(embed.tenant) == 0 and signals == []
    # The same feedback without the character is taken.
    clean = {"ticket": ticket, "visitor": visitor, "rating": "up", "comment": "Nice"}
    assert client.post(url, clean, content_type="application/json").status_code == 200
    assert _stored(embed.tenant) == 1


def test_the_widget_refuses_a_nul_in_a_form_posted_comment(embed, signals):
    client = Client(raise_request_exception=False)
    ticket, visitor = ticket_for(client, embed), new_visitor()
    reply = _visitors_reply(embed, visitor)
    url = f"/embed/{embed.token}/messages/{reply.pk}/feedback/"
    response = client.post(url, {"ticket": ticket, "visitor": visitor, "rating": "down", "comment": "a\x00b"})
    assert response.status_code == 400 and "cannot be stored" in response.json()["error"]
    assert _stored(embed.tenant) == 0 and signals == []


@ESCAPES
def test_the_chat_page_refuses_a_comment_it_cannot_store_with_400(tenant, other_tenant, member, signals, escape):
    reply = _members_reply(tenant, member)
    client = _logged_in(member, tenant)
    response = client.post(f"/chat/messages/{reply.pk}/feedback/", _json_with({"rating": -1}, escape),
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 400, response.content
    assert "cannot be stored" in response.json()["error"]
    assert _stored(tenant) == 0 and signals == []
    # Another tenant's reply stays a 404, whatever the comment.
    foreign = _members_reply(other_tenant, member)
    response = client.post(f"/chat/messages/{foreign.pk}/feedback/", _json_with({"rating": -1}, escape),
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 404
    assert _stored(other_tenant) == 0


def test_a_feedback_body_nested_too_deep_is_no_server_error(embed, tenant, member):
    deep = b"[" * 100_000
    widget = Client(raise_request_exception=False)
    ticket_for(widget, embed)
    reply = _visitors_reply(embed, new_visitor())
    url = f"/embed/{embed.token}/messages/{reply.pk}/feedback/"
    assert widget.post(url, deep, content_type="application/json").status_code == 403  # no ticket could be read
    own = _members_reply(tenant, member)
    page = _logged_in(member, tenant)
    response = page.post(f"/chat/messages/{own.pk}/feedback/", deep, content_type="application/json")
    assert response.status_code == 400 and "Rate with 1" in response.json()["error"]
    assert _stored(tenant) == 0

"""The widget's pages: only the embed's allowed origins get anything, the frame may be framed by them only, a
visitor reaches only their own conversation, and an embed token opens nothing else of the tenant."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from memory.longterm.recall import recall_for_turn
from memory.models import Conversation
from tenants.scope import all_tenants, tenant_scope
from tenants.services import tenant_delete
from tests.memory.memory_data import remember_story
from tests.widget.helpers import HOST, make_embed, new_visitor, ticket_for
from widget import visitors

pytestmark = pytest.mark.django_db


@pytest.fixture
def embed(tenant, scripted_llm):
    return make_embed(tenant, scripted_llm.base_url)


def test_the_frame_is_refused_to_a_page_of_another_origin(embed, client):
    for referer in ("http://evil.example/page.html", "", "http://shop.example:8080/"):
        response = (
            client.get(f"/embed/{embed.token}/", HTTP_REFERER=referer)
            if referer
            else client.get(f"/embed/{embed.token}/")
        )
        assert response.status_code == 403 and response.content == b"", referer
    assert client.get("/embed/not-a-token/", HTTP_REFERER=f"{HOST}/").status_code == 403


def test_the_frame_may_be_framed_by_the_allowed_origin_only(embed, client):
    response = client.get(f"/embed/{embed.token}/?lang=zh-CN", HTTP_REFERER=f"{HOST}/a/b.html")
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    assert f"frame-ancestors {HOST}" in policy and "'none'" not in policy.split("frame-ancestors")[1].split(";")[0]
    assert "X-Frame-Options" not in response
    assert 'lang="zh-hans"' in response.content.decode() and "<script src=" in response.content.decode()
    assert "<script>" not in response.content.decode()  # no inline script (CSP)


def test_a_revoked_token_gets_nothing(embed, client):
    ticket = ticket_for(client, embed)
    with tenant_scope(embed.tenant):
        embed.revoked_at = embed.created_at
        embed.save()
    assert client.get(f"/embed/{embed.token}/", HTTP_REFERER=f"{HOST}/").status_code == 403
    visitor = new_visitor()
    assert client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": visitor}).status_code == 403


def test_a_visitor_gets_their_own_conversation_marked_widget(embed, client):
    ticket = ticket_for(client, embed, lang="zh-hans")
    first, second = new_visitor(), new_visitor()
    page = client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": first})
    assert page.status_code == 200 and "发送" in page.content.decode()  # "Send" in Chinese
    assert f"frame-ancestors {HOST}" in page["Content-Security-Policy"]
    client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": first})
    client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": second})
    with tenant_scope(embed.tenant):
        conversations = list(Conversation.objects.filter(agent=embed.agent).order_by("id"))
    assert len(conversations) == 2  # one per visitor, found again on the second visit
    assert {c.source for c in conversations} == {"widget"}
    assert conversations[0].user_id != conversations[1].user_id and conversations[0].visitor != conversations[1].visitor
    assert first not in conversations[0].visitor  # only a hash of the visitor's id is kept
    assert not conversations[0].user.is_active and not conversations[0].user.has_usable_password()


def test_a_bad_ticket_or_visitor_id_is_refused(embed, other_tenant, scripted_llm, client):
    ticket = ticket_for(client, embed)
    other = make_embed(other_tenant, scripted_llm.base_url)
    assert client.get(f"/embed/{embed.token}/chat/", {"ticket": "x", "visitor": new_visitor()}).status_code == 403
    assert client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": "short"}).status_code == 403
    # A ticket of one embed opens no other embed (another tenant's here).
    assert client.get(f"/embed/{other.token}/chat/", {"ticket": ticket, "visitor": new_visitor()}).status_code == 403


def test_an_embed_token_opens_nothing_else_of_the_tenant(embed, tenant, client):
    """No other agent, no knowledge-base pages, no admin, no API: the token is no credential there."""
    with tenant_scope(tenant):
        ticket_for(client, embed)  # the visitor's browser has loaded the frame
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {embed.token}")
    for url in ("/api/v1/agents/", "/api/v1/conversations/", "/api/v1/knowledge-bases/", "/v1/models"):
        assert bearer.get(url).status_code in (401, 403), url
    for url in ("/agents/", f"/agents/{embed.agent.pk}/", "/knowledge/", "/chat/", "/admin/"):
        response = client.get(url)
        assert response.status_code in (302, 403, 404), url
        assert embed.agent.name.encode() not in response.content, url


def test_embed_js_is_a_static_script(client):
    response = client.get("/embed.js")
    assert response.status_code == 302 and response["Location"].endswith("widget/embed.js")


def test_a_deleted_tenants_visitors_go_with_it(embed, client):
    ticket = ticket_for(client, embed)
    client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": new_visitor()})
    User = get_user_model()
    assert User.objects.filter(username__startswith=f"visitor-{embed.pk}-").count() == 1
    with all_tenants(reason="a platform superuser deletes the tenant (as the admin does)"):
        tenant_delete(tenant=embed.tenant)
    assert not User.objects.filter(username__startswith="visitor-").exists()


def test_long_term_memory_is_per_visitor(embed, client):
    """The agent's memory of one visitor is recalled in that visitor's conversation, never in another's."""
    ticket = ticket_for(client, embed)
    first, second = new_visitor(), new_visitor()
    for visitor in (first, second):
        client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": visitor})
    with tenant_scope(embed.tenant):
        mine = visitors.visitor_conversation(embed, first)
        theirs = visitors.visitor_conversation(embed, second)
        remember_story(user=mine.user, agent_id=embed.agent_id, word=" SECRETWORD")
        assert "SECRETWORD" in " ".join(recall_for_turn(mine, "Where is order 42?").lines)
        assert "SECRETWORD" not in " ".join(recall_for_turn(theirs, "Where is order 42?").lines)

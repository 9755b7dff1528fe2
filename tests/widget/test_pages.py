"""The widget's pages: only the embed's allowed origins get anything, the frame may be framed by them only, a
visitor reaches only their own conversation, their credentials never ride in a URL, a page load makes nothing, and
an embed token opens nothing else of the tenant."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from agents.config import agent_config
from agents.limits import message_limit
from chat import selectors
from memory.longterm.recall import recall_for_turn
from memory.models import Conversation, Message, Visitor
from memory.services import message_add
from tenants.scope import all_tenants, tenant_scope
from tenants.services import tenant_delete
from tests.memory.memory_data import remember_story
from tests.widget.helpers import (
    HOST,
    make_embed,
    new_visitor,
    open_chat,
    page_json,
    ticket_for,
    visitor_conversation_start,
)
from widget import visitors

pytestmark = pytest.mark.django_db

BOOT_JS = Path(settings.BASE_DIR) / "static" / "widget" / "boot.js"


@pytest.fixture
def embed(tenant, scripted_llm):
    return make_embed(tenant, scripted_llm.base_url)


def _chat(client: Client, embed, **body):
    return client.post(f"/embed/{embed.token}/chat/", body)


def _urls(html: str) -> list[str]:
    """Every URL a page names in its markup (links, scripts, forms)."""
    return re.findall(r'(?:href|src|action)="([^"]*)"', html)


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
    response = _chat(client, embed, ticket=ticket, visitor=new_visitor())
    assert response.status_code == 403 and response.content == b""


def test_a_visitor_sees_their_own_conversation_and_no_other(embed, client):
    first, second = new_visitor(), new_visitor()
    conversation = visitor_conversation_start(embed, first, "Where is order 42?")
    mine = open_chat(client, embed, first, lang="zh-hans")
    body = mine.response.content.decode()
    assert "发送" in body and "Where is order 42?" in body  # "Send" in Chinese, and the visitor's message
    assert f"frame-ancestors {HOST}" in mine.response["Content-Security-Policy"]
    assert mine.ws_path == f"/ws/embed/{embed.token}/"
    assert mine.socket_auth == {"type": "visitor", "ticket": mine.socket_auth["ticket"], "visitor": first}
    assert visitors.ticket_read(embed, mine.socket_auth["ticket"]).lang == "zh-hans"
    assert mine.config["feedbackFields"] == {"ticket": mine.socket_auth["ticket"], "visitor": first}
    with tenant_scope(embed.tenant):
        assert mine.config["lastSeq"] == selectors.stream_resume_seq(conversation_id=conversation.pk)
        assert mine.config["maxChars"] == selectors.conversation_message_limit(conversation=conversation).chars

    theirs = open_chat(client, embed, second)
    assert "order 42" not in theirs.response.content.decode() and 'id="chat-empty"' in theirs.response.content.decode()
    assert theirs.config["lastSeq"] == 0 and theirs.socket_auth["visitor"] == second
    with tenant_scope(embed.tenant):
        agent = embed.agent
        expected = message_limit(agent_config(agent=agent, version=agent.published_version())).chars
    assert theirs.config["maxChars"] == expected > 0


def test_a_bad_ticket_or_visitor_id_is_refused(embed, other_tenant, scripted_llm, client):
    ticket = ticket_for(client, embed)
    other = make_embed(other_tenant, scripted_llm.base_url)
    for token, body in (
        (embed.token, {"ticket": "x", "visitor": new_visitor()}),
        (embed.token, {"ticket": ticket, "visitor": "short"}),
        (embed.token, {"ticket": ticket, "visitor": new_visitor().upper()}),
        (embed.token, {"ticket": ticket}),
        (embed.token, {}),
        ("not-a-token", {"ticket": ticket, "visitor": new_visitor()}),
        (other.token, {"ticket": ticket, "visitor": new_visitor()}),  # a ticket opens no other embed (tenant)
    ):
        response = client.post(f"/embed/{token}/chat/", body)
        assert response.status_code == 403 and response.content == b"", body


def test_finding_no_credential_in_any_widget_url(embed, client):
    """Issue 34: the ticket and the visitor's id rode in the chat page's URL, so access logs held them and a logged
    URL replayed without cookie or Referer showed the visitor's conversation. Now no URL carries them."""
    visitor = new_visitor()
    visitor_conversation_start(embed, visitor, "My address is 1 Secret Lane")
    framed = client.get(f"/embed/{embed.token}/?lang=en", HTTP_REFERER=f"{HOST}/shop/page.html")
    boot = page_json(framed, "widget-boot")
    ticket = boot["ticket"]
    assert boot["chatUrl"] == f"/embed/{embed.token}/chat/"
    for url in [*_urls(framed.content.decode()), boot["chatUrl"]]:
        assert ticket not in url and "?" not in url, url

    # boot.js posts a form (target _self) with the ticket and the id as fields; it builds no URL and navigates to none.
    script = BOOT_JS.read_text(encoding="utf-8")
    assert 'form.method = "post"' in script and "form.action = boot.chatUrl;" in script
    assert "location" not in script and "encodeURIComponent" not in script
    assert not [text for text in re.findall(r'"([^"]*)"', script) if "?" in text or "=" in text]

    page = open_chat(client, embed, visitor)
    html = page.response.content.decode()
    for url in [*_urls(html), page.ws_path, page.config["feedbackUrl"]]:
        assert page.socket_auth["ticket"] not in url and visitor not in url and "?" not in url, url

    # The old URL, as an access log kept it, replayed with no cookie and no Referer: nothing of the conversation.
    replay = Client().get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": visitor})
    assert replay.status_code == 405 and replay["Allow"] == "POST"
    assert b"Secret Lane" not in replay.content and b"chat-config" not in replay.content
    assert Client().get(f"/embed/{embed.token}/chat/").status_code == 405


def _rows(tenant) -> tuple[int, int, int, int]:
    with tenant_scope(tenant):
        counts = (Conversation.objects.count(), Visitor.objects.count(), Message.objects.count())
    return (get_user_model().objects.count(), *counts)


def test_finding_a_page_load_creates_nothing(embed, client, django_assert_max_num_queries):
    """Issue 34: each new visitor id made an account and a conversation on page load, so a script could fill the
    tables. Now the frame and the chat page only read; the engine makes the visitor with their first message."""
    before = _rows(embed.tenant)
    for _ in range(100):
        visitor = new_visitor()
        page = open_chat(client, embed, visitor)
        assert page.config["lastSeq"] == 0 and page.socket_auth["visitor"] == visitor
    assert _rows(embed.tenant) == before
    with tenant_scope(embed.tenant):
        assert visitors.visitor_conversation(embed, visitor) is None
    ticket = ticket_for(client, embed)
    # A new visitor's chat page: the token, their (no) conversation, the version, tenant and provider of the limit,
    # the tool labels.
    with django_assert_max_num_queries(6):
        assert _chat(client, embed, ticket=ticket, visitor=new_visitor()).status_code == 200


def test_feedback_is_only_on_the_visitors_own_replies(embed, client):
    ticket = ticket_for(client, embed)
    first, newcomer = new_visitor(), new_visitor()
    conversation = visitor_conversation_start(embed, first)
    with tenant_scope(embed.tenant):
        reply = message_add(conversation=conversation, role="assistant", content="On its way.")
    url = f"/embed/{embed.token}/messages/{reply.pk}/feedback/"
    body = {"ticket": ticket, "visitor": first, "rating": 1}
    assert client.post(url, body, content_type="application/json").status_code == 200
    # A visitor with no conversation yet has nothing to rate; a malformed id or ticket is refused.
    assert client.post(url, {**body, "visitor": newcomer}, content_type="application/json").status_code == 404
    assert client.post(url, {**body, "visitor": "short"}, content_type="application/json").status_code == 403
    assert client.post(url, {**body, "ticket": "forged"}, content_type="application/json").status_code == 403


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


def test_a_deleted_tenants_visitors_go_with_it(embed):
    account = visitor_conversation_start(embed, new_visitor()).user_id
    User = get_user_model()
    assert User.objects.filter(pk=account, is_active=False).exists()
    with all_tenants(reason="a platform superuser deletes the tenant (as the admin does)"):
        tenant_delete(tenant=embed.tenant)
    assert not User.objects.filter(pk=account).exists()


def test_long_term_memory_is_per_visitor(embed):
    """The agent's memory of one visitor is recalled in that visitor's conversation, never in another's."""
    first, second = new_visitor(), new_visitor()
    visitor_conversation_start(embed, first)
    visitor_conversation_start(embed, second)
    with tenant_scope(embed.tenant):
        mine = visitors.visitor_conversation(embed, first)
        theirs = visitors.visitor_conversation(embed, second)
        remember_story(user=mine.user, agent_id=embed.agent_id, word=" SECRETWORD")
        assert "SECRETWORD" in " ".join(recall_for_turn(mine, "Where is order 42?").lines)
        assert "SECRETWORD" not in " ".join(recall_for_turn(theirs, "Where is order 42?").lines)

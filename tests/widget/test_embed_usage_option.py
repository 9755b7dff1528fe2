"""Issue 36: widget visitors saw the token accounting ("Token：提示 1704 + 补全 350") under every reply. An embed shows
it only when its new option says so (`show_token_usage`, off by default); the chat page keeps it for members."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.services import conversation_start
from memory.services import assistant_message_finish
from tenants.scope import tenant_scope
from tests.widget.helpers import make_embed, new_visitor, open_chat, page_json, visitor_conversation_start
from widget.models import EmbedToken

pytestmark = pytest.mark.django_db

USAGE = {"prompt_tokens": 1704, "completion_tokens": 350}


def _visitor_with_a_reply(embed):
    visitor = new_visitor()
    conversation = visitor_conversation_start(embed, visitor, "Warranty?")
    with tenant_scope(embed.tenant):
        assistant_message_finish(conversation=conversation, content="25 years.", usage=USAGE)
    return visitor, conversation


def test_visitors_see_no_token_accounting_by_default(client, tenant, scripted_llm):
    embed = make_embed(tenant, scripted_llm.base_url)
    assert embed.show_token_usage is False
    visitor, _conversation = _visitor_with_a_reply(embed)
    for lang in ("en", "zh-hans"):
        chat = open_chat(client, embed, visitor, lang=lang)
        page = chat.response.content.decode()
        assert "25 years." in page
        assert "chat-usage" not in page and "1704" not in page and "350" not in page
        # static/js/chat.js draws no token line for a live reply either.
        assert chat.config["showUsage"] is False


def test_the_embed_option_shows_it_to_visitors(client, tenant, scripted_llm):
    embed = make_embed(tenant, scripted_llm.base_url, show_token_usage=True)
    visitor, _conversation = _visitor_with_a_reply(embed)
    chat = open_chat(client, embed, visitor)
    page = chat.response.content.decode()
    assert chat.config["showUsage"] is True
    assert 'class="chat-usage"' in page and "Tokens: 1704 prompt + 350 completion" in page


def test_the_chat_page_keeps_the_token_accounting(login, member, tenant, scripted_llm):
    embed = make_embed(tenant, scripted_llm.base_url)  # off for visitors; members on the chat page still see it
    with tenant_scope(tenant):
        conversation = conversation_start(agent=embed.agent, user=member)
        assistant_message_finish(conversation=conversation, content="South.", usage=USAGE)
    url = reverse("chat:conversation", args=[conversation.pk])
    response = login(member, tenant).get(url, HTTP_ACCEPT_LANGUAGE="en")
    page = response.content.decode()
    assert "Tokens: 1704 prompt + 350 completion" in page
    assert page_json(response, "chat-config").get("showUsage", True) is True


def test_the_admin_sets_the_option_and_sees_only_its_tenants_embeds(
    login, tenant, tenant_admin, other_tenant, scripted_llm
):
    embed = make_embed(tenant, scripted_llm.base_url)
    theirs = make_embed(other_tenant, scripted_llm.base_url)
    client = login(tenant_admin, tenant)
    url = reverse("admin:widget_embedtoken_change", args=[embed.pk])
    page = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'name="show_token_usage"' in page and "Show the tokens" in page
    assert 'name="show_token_usage" checked' not in page  # off by default
    response = client.post(
        url,
        {
            "agent": embed.agent.pk,
            "name": embed.name,
            "allowed_origins": embed.allowed_origins,
            "visitor_messages_per_hour": 20,
            "daily_token_budget": 1000,
            "show_token_usage": "on",
            "max_file_mb": 10,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    with tenant_scope(tenant):
        assert EmbedToken.objects.get(pk=embed.pk).show_token_usage is True
    # Another tenant's embed is not there for this admin (the admin's "does not exist" redirect).
    response = client.get(reverse("admin:widget_embedtoken_change", args=[theirs.pk]))
    assert response.status_code == 302 and response.url == reverse("admin:index")
    with tenant_scope(other_tenant):
        assert EmbedToken.objects.get(pk=theirs.pk).show_token_usage is False

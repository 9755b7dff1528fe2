"""Issue 36: a rating stays. The chat page and the widget render the viewer's stored rating (and comment) on each
reply after a reload, with drawn icons and translated labels instead of emoji; nobody else's rating shows, and a
reader who may not rate (an admin reading a member's conversation) gets no buttons."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.services import agent_create, agent_publish, conversation_start
from memory.feedback import feedback_record
from memory.models import ConversationSource
from memory.services import assistant_message_finish, message_add
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.widget.helpers import make_embed, new_visitor, open_chat, visitor_conversation_start

pytestmark = pytest.mark.django_db

EMOJI = re.compile("[\U0001f300-\U0001faff]")


def _bubble(page: str, message_id: int) -> str:
    """The markup of one reply's bubble (its <li>, up to the next message's or the log's end)."""
    start = page.index(f'data-message-id="{message_id}"')
    ends = [end for end in (page.find('<li class="chat-msg', start), page.find("</ol>", start)) if end != -1]
    return page[start : min(ends)]


def _pressed(bubble: str) -> dict[str, str]:
    """The rating buttons' pressed state: {"1": "true"|"false", "-1": ...}."""
    return dict(re.findall(r'class="chat-feedback-\w+" data-rating="(-?1)" aria-pressed="(\w+)"', bubble))


def _two_replies(tenant, user):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Solar advisor", system_prompt="You advise.", model="gpt-4")
        agent_publish(agent=agent, user=None)
        conversation = conversation_start(agent=agent, user=user)
        message_add(conversation=conversation, role="user", content="Which way?")
        first = assistant_message_finish(conversation=conversation, content="South.", usage={"prompt_tokens": 9})
        message_add(conversation=conversation, role="user", content="And the tilt?")
        second = assistant_message_finish(conversation=conversation, content="30 degrees.")
    return conversation, first, second


def test_the_chat_page_shows_the_members_stored_rating_after_a_reload(login, member, tenant):
    conversation, first, second = _two_replies(tenant, member)
    client = login(member, tenant)
    response = client.post(
        reverse("chat:feedback", args=[first.pk]),
        {"rating": -1, "comment": "Say why, please."},
        content_type="application/json",
    )
    assert response.status_code == 200

    page = client.get(reverse("chat:conversation", args=[conversation.pk]), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    rated, unrated = _bubble(page, first.pk), _bubble(page, second.pk)
    assert _pressed(rated) == {"1": "false", "-1": "true"}
    assert 'class="chat-feedback" data-rating="-1"' in rated
    assert 'value="Say why, please."' in rated  # the stored comment, ready to be changed
    assert _pressed(unrated) == {"1": "false", "-1": "false"}
    assert "data-rating=" not in unrated.split('class="chat-feedback"')[1].split(">")[0]

    # Rating again replaces it, and the reload shows the new one.
    client.post(reverse("chat:feedback", args=[first.pk]), {"rating": "up"}, content_type="application/json")
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert _pressed(_bubble(page, first.pk)) == {"1": "true", "-1": "false"}


def test_the_rating_buttons_are_drawn_icons_with_translated_labels(login, member, tenant):
    conversation, first, _second = _two_replies(tenant, member)
    for language, up, down in (("en", "Good reply", "Bad reply"), ("zh-hans", "回复很好", "回复不好")):
        page = login(member, tenant).get(
            reverse("chat:conversation", args=[conversation.pk]), HTTP_ACCEPT_LANGUAGE=language
        )
        bubble = _bubble(page.content.decode(), first.pk)
        assert f'aria-label="{up}"' in bubble and f'title="{up}"' in bubble
        assert f'aria-label="{down}"' in bubble and f'title="{down}"' in bubble
        assert bubble.count("<svg") == 2 and 'aria-hidden="true"' in bubble
        assert not EMOJI.search(bubble)
    page = page.content.decode()
    # A new reply's bar is cloned from the page's template (static/js/chat.js): the same icons, no rating.
    template = page.split('<template id="chat-feedback-template">')[1].split("</template>")[0]
    assert template.count("<svg") == 2 and _pressed(template) == {"1": "false", "-1": "false"}
    assert not EMOJI.search(page)


def test_nobody_elses_rating_shows_and_a_reader_gets_no_buttons(login, member, tenant, tenant_admin):
    conversation, first, _second = _two_replies(tenant, member)
    with tenant_scope(tenant):
        feedback_record(message=first, user=member, rating=1, source=ConversationSource.CHAT)
        # A rating of the same reply by someone else (e.g. through the API as another key's user) is theirs only.
        other = UserFactory(username="colleague")
        MembershipFactory(tenant=tenant, user=other)
        feedback_record(message=first, user=other, rating=-1, source=ConversationSource.API)
    page = login(member, tenant).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert _pressed(_bubble(page, first.pk)) == {"1": "true", "-1": "false"}

    # The admin reads the member's conversation: no rating buttons, no template, nobody's rating.
    page = login(tenant_admin, tenant).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert "chat-feedback" not in page and "chat-feedback-template" not in page


def test_the_ratings_add_no_query_per_reply(login, member, tenant, django_assert_max_num_queries):
    conversation, _first, _second = _two_replies(tenant, member)
    with tenant_scope(tenant):
        for number in range(20):
            message_add(conversation=conversation, role="user", content=f"question {number}")
            reply = assistant_message_finish(conversation=conversation, content=f"answer {number}")
            feedback_record(message=reply, user=member, rating=1 if number % 2 else -1, source="chat")
    client = login(member, tenant)
    with django_assert_max_num_queries(12):  # as many as the page without ratings (tests/chat/test_views.py)
        page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert page.count('aria-pressed="true"') == 20


def test_the_widget_shows_the_visitors_stored_rating_after_a_reload(client, tenant, scripted_llm):
    embed = make_embed(tenant, scripted_llm.base_url)
    visitor, stranger = new_visitor(), new_visitor()
    conversation = visitor_conversation_start(embed, visitor, "Warranty?")
    with tenant_scope(tenant):
        reply = assistant_message_finish(conversation=conversation, content="25 years.")
    chat = open_chat(client, embed, visitor)
    response = client.post(
        chat.config["feedbackUrl"].replace("/0/", f"/{reply.pk}/"),
        {"rating": 1, "comment": "Clear.", **chat.config["feedbackFields"]},
        content_type="application/json",
    )
    assert response.status_code == 200

    page = open_chat(client, embed, visitor).response.content.decode()  # the frame loaded again
    bubble = _bubble(page, reply.pk)
    assert _pressed(bubble) == {"1": "true", "-1": "false"} and 'value="Clear."' in bubble
    assert bubble.count("<svg") == 2 and 'aria-label="Good reply"' in bubble and not EMOJI.search(page)
    assert '<template id="chat-feedback-template">' in page

    # Another visitor of the same embed sees nothing of it.
    other = open_chat(client, embed, stranger).response.content.decode()
    assert "25 years." not in other and 'aria-pressed="true"' not in other


def test_the_widget_page_says_it_in_chinese(client, tenant, scripted_llm):
    embed = make_embed(tenant, scripted_llm.base_url)
    visitor = new_visitor()
    conversation = visitor_conversation_start(embed, visitor, "保修多久？")
    with tenant_scope(tenant):
        reply = assistant_message_finish(conversation=conversation, content="25 年。")
        feedback_record(message=reply, user=conversation.user, rating=-1, source=ConversationSource.WIDGET)
    page = open_chat(client, embed, visitor, lang="zh-hans").response.content.decode()
    bubble = _bubble(page, reply.pk)
    assert _pressed(bubble) == {"1": "false", "-1": "true"}
    assert 'aria-label="回复很好"' in bubble and 'aria-label="回复不好"' in bubble

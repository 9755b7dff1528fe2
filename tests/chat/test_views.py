"""The chat page: conversation list, starting a conversation, history with markers; tenant and member isolation."""

import pytest
from django.urls import reverse

from agents.services import agent_create, agent_publish, conversation_start
from memory.models import Conversation, ConversationContext, MessageStatus
from memory.services import assistant_message_finish, message_add, tool_exchange_add
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(client):
    """Assertions read the English source strings, whatever the zh-hans catalogue says."""
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"


def _agent(tenant, name="Solar advisor", strategy=None, **fields):
    with tenant_scope(tenant):
        agent = agent_create(
            tenant=tenant,
            name=name,
            system_prompt="You advise on solar panels.",
            model="gpt-4",
            token_overflow_config=strategy or {"strategy": "none"},
            **fields,
        )
        agent_publish(agent=agent, user=None)
    return agent


def _conversation(tenant, user, agent, title=""):
    with tenant_scope(tenant):
        return conversation_start(agent=agent, user=user, title=title)


def test_home_shows_the_chat_card(login, member, tenant):
    response = login(member, tenant).get(reverse("home"))
    assert 'data-card="chat"' in response.content.decode()
    assert reverse("chat:list") in response.content.decode()


def test_list_shows_only_the_users_conversations_of_the_active_tenant(
    login, member, tenant, tenant_admin, other_tenant
):
    agent = _agent(tenant)
    mine = _conversation(tenant, member, agent, title="Panels for the roof")
    _conversation(tenant, tenant_admin, agent, title="The admin's own question")
    # The same user in another tenant: that conversation belongs to the other tenant's list.
    MembershipFactory(tenant=other_tenant, user=member)
    elsewhere = _conversation(other_tenant, member, _agent(other_tenant, name="Menu helper"), title="Dumplings")

    page = login(member, tenant).get(reverse("chat:list")).content.decode()
    assert "Panels for the roof" in page
    assert reverse("chat:conversation", args=[mine.pk]) in page
    assert "The admin's own question" not in page
    assert "Dumplings" not in page and reverse("chat:conversation", args=[elsewhere.pk]) not in page
    # The picker offers the tenant's active agents only.
    assert "Solar advisor" in page and "Menu helper" not in page


def test_list_leaves_out_plan_step_conversations_even_for_an_admin(login, tenant, tenant_admin):
    planner, step_agent = _agent(tenant, name="Planner"), _agent(tenant, name="Economics")
    own = _conversation(tenant, tenant_admin, planner, title="My plan")
    with tenant_scope(tenant):
        step = conversation_start(agent=step_agent, user=tenant_admin, parent=own, title=f"plan:{own.pk}")
    page = login(tenant_admin, tenant).get(reverse("chat:list")).content.decode()
    assert "My plan" in page and f"plan:{own.pk}" not in page
    assert reverse("chat:conversation", args=[step.pk]) not in page
    # The admin opens it from the plan log (tests/plans/test_plan_log.py), not from the list.
    assert login(tenant_admin, tenant).get(reverse("chat:conversation", args=[step.pk])).status_code == 200


def test_list_is_newest_first(login, member, tenant):
    agent = _agent(tenant)
    older = _conversation(tenant, member, agent, title="older one")
    newer = _conversation(tenant, member, agent, title="newer one")
    with tenant_scope(tenant):
        message_add(conversation=older, role="user", content="bump")  # touched last: first in the list
    page = login(member, tenant).get(reverse("chat:list")).content.decode()
    assert page.index("older one") < page.index("newer one")
    assert newer.pk


def test_empty_state_without_agents_tells_an_admin_to_create_one(login, member, tenant_admin, tenant):
    page = login(member, tenant).get(reverse("chat:list")).content.decode()
    assert 'id="no-agents"' in page
    assert "A tenant admin must create and publish one first." in page


def test_empty_state_with_agents_says_what_to_do(login, member, tenant):
    _agent(tenant)
    page = login(member, tenant).get(reverse("chat:list")).content.decode()
    assert 'id="no-conversations"' in page and "press Start" in page


def test_start_a_conversation_with_an_agent(login, member, tenant):
    agent = _agent(tenant, strategy={"strategy": "sliding_window", "max_tokens": 4096})
    response = login(member, tenant).post(reverse("chat:start"), {"agent": agent.pk})
    with tenant_scope(tenant):
        conversation = Conversation.objects.get(user=member)
        assert conversation.agent_id == agent.pk and conversation.version is not None
        assert conversation.context.strategy == "sliding_window"
    assert response.status_code == 302
    assert response.url == reverse("chat:conversation", args=[conversation.pk])


def test_starting_with_another_tenants_agent_is_refused(login, member, tenant, other_tenant):
    foreign = _agent(other_tenant, name="Menu helper")
    client = login(member, tenant)
    assert client.post(reverse("chat:start"), {"agent": foreign.pk}).status_code == 404
    assert client.post(reverse("chat:start"), {"agent": "not a number"}).status_code == 404
    inactive = _agent(tenant, name="Retired", active=False)
    assert client.post(reverse("chat:start"), {"agent": inactive.pk}).status_code == 404
    with tenant_scope(other_tenant):
        assert not Conversation.objects.exists()
    with tenant_scope(tenant):
        assert not Conversation.objects.exists()


def test_start_needs_a_post(login, member, tenant):
    assert login(member, tenant).get(reverse("chat:start")).status_code == 405


def test_pages_need_a_login(client, tenant):
    response = client.get(reverse("chat:list"))
    assert response.status_code == 302 and reverse("login") in response.url


def test_another_tenants_conversation_is_404(login, member, tenant, other_tenant, other_tenant_admin):
    theirs = _conversation(other_tenant, other_tenant_admin, _agent(other_tenant, name="Menu helper"))
    assert login(member, tenant).get(reverse("chat:conversation", args=[theirs.pk])).status_code == 404


def test_a_tenant_admin_cannot_open_another_tenants_conversation(login, tenant_admin, tenant, other_tenant):
    stranger = UserFactory(username="stranger")
    MembershipFactory(tenant=other_tenant, user=stranger)
    theirs = _conversation(other_tenant, stranger, _agent(other_tenant, name="Menu helper"))
    assert login(tenant_admin, tenant).get(reverse("chat:conversation", args=[theirs.pk])).status_code == 404


def test_another_members_conversation_is_404_but_an_admin_may_open_it(login, member, tenant, tenant_admin):
    colleague = UserFactory(username="colleague")
    MembershipFactory(tenant=tenant, user=colleague)
    theirs = _conversation(tenant, colleague, _agent(tenant), title="Colleague's question")
    assert login(member, tenant).get(reverse("chat:conversation", args=[theirs.pk])).status_code == 404

    response = login(tenant_admin, tenant).get(reverse("chat:conversation", args=[theirs.pk]))
    page = response.content.decode()
    assert response.status_code == 200 and "Colleague&#x27;s question" in page
    # The admin reads it; only its owner writes in it.
    assert 'id="chat-form"' not in page and "read only" in page


def test_history_renders_markdown_and_neutralises_script(login, member, tenant):
    conversation = _conversation(tenant, member, _agent(tenant))
    with tenant_scope(tenant):
        message_add(conversation=conversation, role="user", content="<script>alert('user')</script> hi **there**")
        assistant_message_finish(
            conversation=conversation,
            content="**Bold** answer\n\n<script>alert('model')</script>\n\n| kW | yuan |\n|---|---|\n| 5 | 30000 |",
            usage={"prompt_tokens": 120, "completion_tokens": 34},
        )
    page = login(member, tenant).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert "<strong>Bold</strong> answer" in page
    assert "<td>30000</td>" in page
    assert "alert('model')" not in page and "alert(&#x27;model&#x27;)" not in page
    # The user's text is shown as text, not markup.
    assert "&lt;script&gt;alert(&#x27;user&#x27;)&lt;/script&gt; hi **there**" in page
    assert "<script>alert" not in page
    assert "Tokens: 120 prompt + 34 completion" in page
    assert 'id="chat-form"' in page and 'id="chat-config"' in page and 'id="chat-labels"' in page
    assert f"/ws/chat/{conversation.pk}/" in page


def test_partial_and_failed_replies_are_marked(login, member, tenant):
    conversation = _conversation(tenant, member, _agent(tenant))
    with tenant_scope(tenant):
        message_add(conversation=conversation, role="user", content="first")
        partial = assistant_message_finish(
            conversation=conversation, content="Half an ans", error_code="stream_dropped"
        )
        message_add(conversation=conversation, role="user", content="second")
        failed = assistant_message_finish(conversation=conversation, content="", error_code="provider_timeout")
    assert partial.status == MessageStatus.PARTIAL and failed.status == MessageStatus.ERROR
    page = login(member, tenant).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert 'data-status="partial"' in page and "This reply is incomplete." in page
    assert "cut off mid-way" in page
    assert 'data-status="error"' in page and "This reply failed." in page and "did not answer in time" in page
    # A failed reply is not an "earlier message the strategy took out".
    assert 'id="earlier-marker"' not in page


def test_tool_calls_show_as_progress_lines(login, member, tenant):
    conversation = _conversation(tenant, member, _agent(tenant))
    calls = [{"id": "call_1", "type": "function", "function": {"name": "kb_query", "arguments": "{}"}}]
    with tenant_scope(tenant):
        message_add(conversation=conversation, role="user", content="menu?")
        message_add(conversation=conversation, role="assistant", content="", tool_calls=calls)
        message_add(conversation=conversation, role="tool", content='{"hits": 2}', tool_call_id="call_1")
        message_add(conversation=conversation, role="assistant", content="Two dishes.")
    page = login(member, tenant).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    # An unregistered tool has no label: the line falls back to its name. One line per call, with its outcome.
    assert page.count('class="chat-tool"') == 1 and "Tool “kb_query” finished" in page
    assert '{"hits": 2}' not in page and "{&quot;hits&quot;: 2}" not in page


def test_a_tool_call_shows_its_label_and_outcome_inside_the_reply_bubble(login, member, tenant):
    """The reloaded page tells what the live one told: the label in the page's language, failed for a call whose
    result was stored as failed (tool_exchange_add), completed otherwise; in the bubble of the reply it led to."""
    conversation = _conversation(tenant, member, _agent(tenant))
    calls = [
        {"id": "call_m", "type": "function", "function": {"name": "menu", "arguments": "{}"}},
        {"id": "call_o", "type": "function", "function": {"name": "order", "arguments": "{}"}},
    ]
    with tenant_scope(tenant):
        message_add(conversation=conversation, role="user", content="再来两个面包")
        tool_exchange_add(
            conversation=conversation,
            content="",
            tool_calls=calls,
            results=[("call_m", "面包 售罄"), ("call_o", "Error: 面包已售罄")],
            failed={"call_o"},
        )
        reply = message_add(conversation=conversation, role="assistant", content="面包已售罄。")
    client = login(member, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    html = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    bubble = html[html.index(f'data-message-id="{reply.pk}"') :]
    bubble = bubble[: bubble.index("</li>\n")]
    line = '<li class="chat-tool" data-call-id="{}" data-status="{}" title="{}">{}</li>'
    assert line.format("call_m", "completed", "menu", "工具「菜单查询」已完成") in bubble
    assert line.format("call_o", "failed", "order", "工具「点餐」失败") in bubble
    assert html.count('class="chat-msg chat-assistant') == 1  # the tool round is not a bubble of its own


def _long_history(tenant, conversation, turns):
    ids = []
    with tenant_scope(tenant):
        for number in range(turns):
            ids.append(message_add(conversation=conversation, role="user", content=f"question {number}").pk)
            ids.append(
                message_add(
                    conversation=conversation,
                    role="assistant",
                    content=f"answer **{number}**",
                    usage={"prompt_tokens": 10 + number, "completion_tokens": 5},
                ).pk
            )
    return ids


def test_strategy_badge_and_summary_marker(login, member, tenant):
    agent = _agent(tenant, strategy={"strategy": "summarize", "max_tokens": 8192, "summary_threshold": 4})
    conversation = _conversation(tenant, member, agent)
    ids = _long_history(tenant, conversation, 4)
    with tenant_scope(tenant):
        ConversationContext.objects.filter(conversation=conversation).update(
            summary="The user asked about <b>panels</b> and prices.",
            active_messages=ids[3:],
            summarized_through=ids[2],
        )
    page = login(member, tenant).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert 'id="strategy-badge" data-strategy="summarize"' in page
    assert "3 earlier messages were summarised" in page
    assert "The user asked about &lt;b&gt;panels&lt;/b&gt; and prices." in page
    # The marker sits where the model's context now starts: after "question 1" (the 3rd message), before its answer.
    marker = page.index('id="earlier-marker"')
    assert page.index("question 1") < marker < page.index("answer <strong>1</strong>")


def test_sliding_window_marker(login, member, tenant):
    agent = _agent(tenant, strategy={"strategy": "sliding_window", "max_tokens": 4096})
    conversation = _conversation(tenant, member, agent)
    ids = _long_history(tenant, conversation, 3)
    with tenant_scope(tenant):
        ConversationContext.objects.filter(conversation=conversation).update(active_messages=ids[2:])
    client = login(member, tenant)
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert 'data-strategy="sliding_window"' in page and "Sliding window" in page
    assert "2 earlier messages were dropped by the sliding window" in page


def test_conversation_page_queries_do_not_grow_with_history(login, member, tenant, django_assert_max_num_queries):
    conversation = _conversation(tenant, member, _agent(tenant))
    _long_history(tenant, conversation, 25)  # 50 messages
    client = login(member, tenant)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("chat:conversation", args=[conversation.pk]))
    assert response.status_code == 200
    assert response.content.decode().count("chat-msg chat-assistant") == 25


def test_conversation_list_queries_are_bounded(login, member, tenant, django_assert_max_num_queries):
    agent = _agent(tenant)
    for number in range(20):
        _conversation(tenant, member, agent, title=f"conversation {number}")
    client = login(member, tenant)
    with django_assert_max_num_queries(10):
        assert client.get(reverse("chat:list")).status_code == 200


def test_a_draft_is_not_offered_in_the_chat_nor_started(login, member, tenant):
    """A newcomer's finding: an agent saved but never published was offered in the chat, first, and answered."""
    _agent(tenant, name="Published one")
    with tenant_scope(tenant):
        draft = agent_create(tenant=tenant, name="A draft", system_prompt="Not ready.", model="gpt-4")
    client = login(member, tenant)
    page = client.get(reverse("chat:list")).content.decode()
    assert "Published one" in page and "A draft" not in page
    assert client.post(reverse("chat:start"), {"agent": draft.pk}).status_code == 404
    with tenant_scope(tenant):
        assert not Conversation.objects.exists()


def _chat_config(page: str) -> dict:
    import json
    import re

    return json.loads(re.search(r'<script id="chat-config" type="application/json">(.*?)</script>', page).group(1))


def test_the_composer_gets_the_agents_own_message_limit(login, member, tenant):
    """Issue 18: the composer's counter holds to the agent's limit (its model's window), which the socket enforces."""
    from agents.limits import MAX_MESSAGE_CHARS
    from chat.selectors import conversation_message_limit
    from tests.llm.factories import ModelProviderFactory

    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="two sizes", is_default=True, default_chat_model="gpt-4o",
                             chat_models=[{"name": "small-model", "context_window": 600},
                                          {"name": "gpt-4o", "context_window": 128000}])  # fmt: skip
        conversations = []
        for model in ("small-model", "gpt-4o"):
            agent = agent_create(tenant=tenant, name=model, model=model)
            agent_publish(agent=agent, user=None)
            conversations.append(conversation_start(agent=agent, user=member))
        small, large = conversations
        expected = conversation_message_limit(conversation=small).chars
    assert 0 < expected < MAX_MESSAGE_CHARS
    client = login(member, tenant)
    assert _chat_config(client.get(reverse("chat:conversation", args=[small.pk])).content.decode())["maxChars"] == (
        expected
    )
    assert _chat_config(client.get(reverse("chat:conversation", args=[large.pk])).content.decode())["maxChars"] == (
        MAX_MESSAGE_CHARS
    )

"""Conversations and messages: token counts stored once, idempotent resends, one system message, the window."""

import pytest
from django.db import IntegrityError, connection, transaction

from agents.services import conversation_start
from llm.messages import wire
from llm.tokens import count_messages
from memory import overflow
from memory.models import Conversation, ConversationContext, ConversationSource, Message, MessageStatus
from memory.selectors import overflow_metrics_for_agent
from memory.services import assistant_message_finish, context_build, conversation_create, message_add
from tenants.scope import TenantScopeError, no_scope, tenant_scope
from tests.queries import count_statements

pytestmark = pytest.mark.django_db

PROMPT = "You advise on solar panels."


def _chat(conversation, turns):
    for number in range(turns):
        message_add(conversation=conversation, role="user", content=f"question {number} " + "words " * 20)
        message_add(conversation=conversation, role="assistant", content=f"answer {number} " + "words " * 20)


def test_token_count_is_computed_once_on_creation(make_agent, member, in_tenant):
    conversation = conversation_start(agent=make_agent(), user=member)
    calls = [{"id": "call_1", "type": "function", "function": {"name": "kb_query", "arguments": '{"q": "x"}'}}]
    message = message_add(conversation=conversation, role="assistant", content="", tool_calls=calls)
    assert message.token_count == overflow.message_tokens("assistant", "", calls, None, "gpt-4") > 0

    # The stored count is what the window uses: nothing recounts it.
    user = message_add(conversation=conversation, role="user", content="hi")
    Message.objects.filter(pk=user.pk).update(token_count=777)
    built = context_build(conversation=conversation, system_prompt=PROMPT)
    assert built.window.messages[-1].token_count == 777


def test_a_resent_user_message_is_stored_once(make_agent, member, in_tenant):
    conversation = conversation_start(agent=make_agent(), user=member)
    first = message_add(conversation=conversation, role="user", content="hello", client_id="c-1")
    again = message_add(conversation=conversation, role="user", content="hello", client_id="c-1")
    assert again.pk == first.pk
    assert Message.objects.filter(conversation=conversation).count() == 1
    assert ConversationContext.objects.get(conversation=conversation).active_messages == [first.pk]
    # Another conversation may use the same client id; the database refuses a duplicate in one conversation.
    other = conversation_start(agent=conversation.agent, user=member)
    assert message_add(conversation=other, role="user", content="hello", client_id="c-1").pk != first.pk
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(conversation=conversation, role="user", content="x", client_id="c-1")


def test_context_build_sends_one_system_message(make_agent, member, in_tenant):
    conversation = conversation_start(agent=make_agent(), user=member)
    message_add(conversation=conversation, role="system", content="Runtime note: the user is in Hangzhou.")
    _chat(conversation, 2)
    message_add(conversation=conversation, role="user", content="and now?")
    built = context_build(conversation=conversation, system_prompt=PROMPT)
    roles = [message.role for message in built.messages]
    assert roles.count("system") == 1 and roles[0] == "system"
    assert "Hangzhou" in built.messages[0].content and PROMPT in built.messages[0].content
    assert built.messages[-1].as_dict() == {"role": "user", "content": "and now?"}


def test_sliding_window_respects_the_budget_and_drops_old_messages(
    make_agent, member, in_tenant, django_assert_max_num_queries
):
    agent = make_agent(strategy="sliding_window", max_tokens=400, reserve_ratio=0.1)
    conversation = conversation_start(agent=agent, user=member)
    _chat(conversation, 12)
    message_add(conversation=conversation, role="user", content="the newest question")

    # Read, load, then (a change) lock and re-read, save; the day's first metric creates its row.
    with django_assert_max_num_queries(10):
        built = context_build(conversation=conversation, system_prompt=PROMPT)
    window = built.window
    assert window.triggered and window.dropped_ids and not window.over_budget
    assert window.tokens_sent <= 360
    assert count_messages(wire(built.messages), "gpt-4") == window.tokens_sent
    context = ConversationContext.objects.get(conversation=conversation)
    assert context.active_messages == [message.id for message in window.messages]
    metrics = overflow_metrics_for_agent(agent_id=agent.pk)
    assert metrics["triggers"] == 1 and metrics["tokens_saved"] == window.tokens_saved > 0

    # The query count does not grow with the conversation.
    _chat(conversation, 20)
    with django_assert_max_num_queries(7):
        context_build(conversation=conversation, system_prompt=PROMPT)
    # A turn that changes nothing reads the context and the messages, and takes no lock.
    with django_assert_max_num_queries(2):
        context_build(conversation=conversation, system_prompt=PROMPT)


def test_assistant_replies_are_stored_complete_partial_or_failed(make_agent, member, in_tenant):
    conversation = conversation_start(agent=make_agent(), user=member)
    message_add(conversation=conversation, role="user", content="hi")
    done = assistant_message_finish(conversation=conversation, content="Hello!", usage={"total_tokens": 9})
    partial = assistant_message_finish(conversation=conversation, content="Hel", error_code="stream_dropped")
    failed = assistant_message_finish(conversation=conversation, content="", error_code="provider_timeout")
    assert [done.status, partial.status, failed.status] == [
        MessageStatus.COMPLETE, MessageStatus.PARTIAL, MessageStatus.ERROR,
    ]  # fmt: skip
    assert (partial.error_code, failed.error_code) == ("stream_dropped", "provider_timeout")
    active = ConversationContext.objects.get(conversation=conversation).active_messages
    assert done.pk in active and partial.pk in active and failed.pk not in active


def test_a_conversation_and_its_context_are_stored_together_and_read_back_as_given(make_agent, member, tenant):
    """On PostgreSQL one statement stores both (a stateless API turn makes a conversation each time); elsewhere two."""
    agent = make_agent(strategy="summarize", max_tokens=4000)
    with tenant_scope(tenant), count_statements() as statements:
        conversation = conversation_create(
            agent=agent, version=None, user=member, provider=None, model="gpt-4", title="T",
            overflow_config=agent.overflow_config(), source=ConversationSource.API,
        )  # fmt: skip
    assert len(statements) == (1 if connection.vendor == "postgresql" else 2), statements.sql
    with tenant_scope(tenant):
        stored = Conversation.objects.get(pk=conversation.pk)
        context = ConversationContext.objects.get(conversation=stored)
    assert (stored.agent_id, stored.user_id, stored.title, stored.source) == (agent.pk, member.pk, "T", "api")
    assert stored.created_at is not None and stored.model == "gpt-4"
    assert context.tenant_id == stored.tenant_id == tenant.pk
    assert context.strategy == "summarize" and context.strategy_config["strategy"] == "summarize"
    assert context.active_messages == [] and not context.summary_pending


def test_a_conversation_is_not_made_in_another_tenants_scope(make_agent, member, tenant, other_tenant):
    with tenant_scope(tenant):
        agent = make_agent()
    with tenant_scope(other_tenant), pytest.raises(TenantScopeError):
        conversation_start(agent=agent, user=member)
    with tenant_scope(tenant):
        assert not Conversation.objects.exists() and not ConversationContext.objects.exists()


def test_conversations_are_scoped_to_their_tenant(make_agent, member, tenant, other_tenant):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=make_agent(), user=member)
        message_add(conversation=conversation, role="user", content="secret")
    with tenant_scope(other_tenant):
        assert not Conversation.objects.filter(pk=conversation.pk).exists()
        assert not Message.objects.filter(conversation_id=conversation.pk).exists()
        assert overflow_metrics_for_agent(agent_id=conversation.agent_id)["triggers"] == 0
        with pytest.raises(TenantScopeError):
            message_add(conversation=conversation, role="user", content="planted")
    with no_scope(), pytest.raises(TenantScopeError):
        list(Conversation.objects.all())


@pytest.mark.django_db
def test_an_untitled_conversation_is_named_after_its_first_message(tenant, member):
    """The probe of a newcomer: conversation titles used global ids ("会话 10" as a tenant's first conversation)."""
    from agents.services import agent_create, conversation_start
    from memory.models import Conversation
    from memory.services import message_add

    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Titler")
        conversation = conversation_start(agent=agent, user=member)
        first = "  我家屋顶朝南，\n适合装多少千瓦的光伏板？再问一个很长的问题  "
        message_add(conversation=conversation, role="user", content=first)
        message_add(conversation=conversation, role="assistant", content="大约 5 千瓦。")
        message_add(conversation=conversation, role="user", content="第二个问题")
        title = Conversation.objects.get(pk=conversation.pk).title
    assert title.startswith("我家屋顶朝南， 适合装多少千瓦的光伏板？") and len(title) <= 40


@pytest.mark.django_db(transaction=True)
def test_messages_stored_at_once_from_several_threads_all_join_the_context_in_order(make_agent, member, tenant):
    """The context's active list is appended by the UPDATE itself (no read first): concurrent writers lose none."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    with tenant_scope(tenant):
        conversation = conversation_start(agent=make_agent(), user=member)

    def store(number: int) -> int:
        try:
            with tenant_scope(tenant):
                return message_add(conversation=conversation, role="user", content=f"message {number}").pk
        finally:
            connection.close()

    threads = 4 if connection.vendor == "postgresql" else 1  # SQLite has one writer: the order is still checked
    with ThreadPoolExecutor(threads) as pool:
        stored = list(pool.map(store, range(40)))
    with tenant_scope(tenant):
        active = ConversationContext.objects.get(conversation=conversation).active_messages
    assert sorted(active) == sorted(stored) and len(active) == 40
    if threads == 1:
        assert active == stored

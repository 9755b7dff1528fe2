"""The summarize strategy end to end: the task calls the scripted model, merges the summary, counts metrics."""

import datetime as dt

import pytest
from django.utils import timezone

from agents.services import conversation_start
from llm.models import CallStatus, LLMCall
from memory.models import ConversationContext
from memory.selectors import overflow_metrics_for_agent
from memory.services import context_build, message_add
from memory.tasks import summarize_conversation

pytestmark = pytest.mark.django_db

PROMPT = "You advise on solar panels."
SUMMARIZE = {"strategy": "summarize", "max_tokens": 100_000, "summary_threshold": 20}


def _messages(conversation, count):
    ids = []
    for number in range(count):
        role = "user" if number % 2 == 0 else "assistant"
        ids.append(message_add(conversation=conversation, role=role, content=f"{role} message {number}").pk)
    return ids


def test_25_messages_at_threshold_20_summarise_the_earliest_5(
    make_agent, member, in_tenant, scripted_provider, scripted_llm, django_capture_on_commit_callbacks
):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "The user asked about panels in Hangzhou."}})
    agent = make_agent(**SUMMARIZE)
    conversation = conversation_start(agent=agent, user=member)
    ids = _messages(conversation, 25)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        built = context_build(conversation=conversation, system_prompt=PROMPT)
    assert len(callbacks) == 1
    assert list(built.window.summarize_ids) == ids[:5]
    assert len(built.messages) == 1 + 20  # this turn already sends only the newest 20

    context = ConversationContext.objects.get(conversation=conversation)
    assert context.summary == "The user asked about panels in Hangzhou."
    assert context.active_messages == ids[5:]
    assert (context.summarized_through, context.summary_pending) == (ids[4], False)
    (request,) = scripted_llm.requests()
    assert "user message 0" in request["body"]["messages"][-1]["content"]
    call = LLMCall.objects.get()
    assert (call.purpose, call.status, call.conversation_id, call.agent_id) == (
        "summary", CallStatus.OK, conversation.pk, agent.pk,
    )  # fmt: skip
    metrics = overflow_metrics_for_agent(agent_id=agent.pk)
    assert (metrics["triggers"], metrics["summaries_made"], metrics["summaries_failed"]) == (1, 1, 0)
    assert metrics["tokens_saved"] > 0

    # The next turn sends the summary inside the one system message.
    message_add(conversation=conversation, role="user", content="and the inverter?")
    ConversationContext.objects.filter(pk=context.pk).update(summary_pending=True)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        built = context_build(conversation=conversation, system_prompt=PROMPT)
    assert callbacks == []  # one summary at a time: none is queued while one is pending
    assert [m.role for m in built.messages].count("system") == 1
    assert "panels in Hangzhou" in built.messages[0].content
    assert built.messages[-1].as_dict() == {"role": "user", "content": "and the inverter?"}

    # A duplicate task for ids already summarised does nothing.
    assert summarize_conversation.delay(conversation.tenant_id, conversation.pk, ids[:5]).get() == "nothing to do"
    assert len(scripted_llm.requests()) == 1


def test_a_failing_model_counts_a_failed_summary_and_the_window_still_fits(
    make_agent, member, in_tenant, scripted_provider, scripted_llm, django_capture_on_commit_callbacks
):
    scripted_llm.set_rules({"when": {}, "reply": {"error": {"status": 500}}})
    agent = make_agent(strategy="summarize", max_tokens=300, summary_threshold=20)
    conversation = conversation_start(agent=agent, user=member)
    ids = _messages(conversation, 25)

    with django_capture_on_commit_callbacks(execute=True):
        built = context_build(conversation=conversation, system_prompt=PROMPT)
    assert not built.window.over_budget and built.window.tokens_sent <= 270

    context = ConversationContext.objects.get(conversation=conversation)
    assert (context.summary, context.summary_pending) == ("", False)
    assert context.active_messages == ids  # nothing lost
    assert len(scripted_llm.requests()) == 1 + summarize_conversation.max_retries
    metrics = overflow_metrics_for_agent(agent_id=agent.pk)
    assert (metrics["summaries_made"], metrics["summaries_failed"]) == (0, 1)

    # The next turn still fits the window, and queues another attempt since none is pending.
    message_add(conversation=conversation, role="user", content="still there?")
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Earlier: greetings and questions."}})
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        built = context_build(conversation=conversation, system_prompt=PROMPT)
    assert len(callbacks) == 1
    assert not built.window.over_budget and built.window.tokens_sent <= 270
    assert built.messages[-1].as_dict() == {"role": "user", "content": "still there?"}
    context.refresh_from_db()
    assert context.summary == "Earlier: greetings and questions."


def test_a_summary_pending_for_too_long_is_queued_again(
    make_agent, member, in_tenant, scripted_provider, scripted_llm, django_capture_on_commit_callbacks
):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Recovered summary."}})
    conversation = conversation_start(agent=make_agent(**SUMMARIZE), user=member)
    ids = _messages(conversation, 25)
    lost = timezone.now() - dt.timedelta(hours=1)  # a task the broker lost
    ConversationContext.objects.filter(conversation=conversation).update(summary_pending=True, summary_queued_at=lost)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        context_build(conversation=conversation, system_prompt=PROMPT)
    assert len(callbacks) == 1
    context = ConversationContext.objects.get(conversation=conversation)
    assert (context.summary, context.active_messages, context.summary_pending) == ("Recovered summary.", ids[5:], False)
    metrics = overflow_metrics_for_agent(agent_id=conversation.agent_id)
    assert (metrics["summaries_retried"], metrics["summaries_made"]) == (1, 1)  # the lost summary is counted

"""Reads of conversation memory."""

from __future__ import annotations

from django.db.models import Sum

from memory.models import Conversation, Message, OverflowMetric

METRIC_FIELDS = ("triggers", "summaries_made", "summaries_failed", "tokens_saved")


def overflow_metrics_for_agent(*, agent_id: int) -> dict[str, int]:
    """The scope's overflow counters of one agent, summed over all days."""
    totals = OverflowMetric.objects.filter(agent_id=agent_id).aggregate(**{name: Sum(name) for name in METRIC_FIELDS})
    return {name: int(totals[name] or 0) for name in METRIC_FIELDS}


def conversation_get(*, conversation_id: int, user=None) -> Conversation:
    """The scope's conversation (of `user`, when given); Conversation.DoesNotExist for anyone else's id."""
    conversations = Conversation.objects.select_related("context")
    if user is not None:
        conversations = conversations.filter(user=user)
    return conversations.get(pk=conversation_id)


def conversation_messages(*, conversation: Conversation) -> list[Message]:
    """Every stored message of a conversation, oldest first (the chat history, not the model's window)."""
    return list(Message.objects.filter(conversation=conversation).order_by("id"))

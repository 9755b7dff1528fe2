"""Reads of conversation memory."""

from __future__ import annotations

from typing import Any

from django.db.models import Sum

from memory.models import Conversation, ConversationSource, OverflowMetric
from tenants.access import may_administer

METRIC_FIELDS = ("triggers", "summaries_made", "summaries_failed", "summaries_retried", "tokens_saved")


def overflow_metrics_for_agent(*, agent_id: int) -> dict[str, int]:
    """The scope's overflow counters of one agent, summed over all days."""
    totals = OverflowMetric.objects.filter(agent_id=agent_id).aggregate(**{name: Sum(name) for name in METRIC_FIELDS})
    return {name: int(totals[name] or 0) for name in METRIC_FIELDS}


def access_conversation(*, conversation_id: int, user: Any, membership: Any) -> Conversation:
    """The scope's conversation `conversation_id` if `user` may open it, with what a page or a turn reads loaded.

    A user opens their own conversations; the tenant's administrators (tenants.access.may_administer) open any,
    a plan step's internal conversation included (they reach those from the plan log); nobody else opens one.
    A test conversation (an agent's draft tried by an administrator) is for administrators only, even its own user's
    once they are a member again.
    Conversation.DoesNotExist otherwise: another tenant's id, another member's conversation, an internal one.
    This is the one rule for the chat page, the websocket, the plan log and the API.
    """
    conversations = Conversation.objects.select_related("agent", "version", "provider", "tenant", "context", "user")
    if not may_administer(user=user, membership=membership):
        conversations = conversations.filter(user_id=user.pk, parent__isnull=True, is_test=False).exclude(
            source=ConversationSource.EVAL  # an evaluation run's are its administrators' (a run's results link them)
        )
    return conversations.get(pk=conversation_id)

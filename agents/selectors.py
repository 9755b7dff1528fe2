"""Reads of agents."""

from __future__ import annotations

from django.db.models import Max

from agents.models import Agent, AgentVersion
from memory.models import Conversation


def agent_list_for_planner(*, active_only: bool = True) -> list[Agent]:
    """The scope's agents with their names and descriptions, for the planner's list-agents tool."""
    agents = Agent.objects.only("id", "name", "description", "kind")
    if active_only:
        agents = agents.filter(active=True)
    return list(agents.order_by("name"))


def agent_get(*, agent_id: int) -> Agent:
    """The scope's agent `agent_id`; Agent.DoesNotExist for another tenant's id (never a leak)."""
    return Agent.objects.get(pk=agent_id)


def agent_list_for_page() -> list[Agent]:
    """The scope's agents for the agents page, each with `published_number` (None while a draft); one query."""
    agents = Agent.objects.select_related("provider").annotate(published_number=Max("versions__number"))
    return list(agents.order_by("name"))


def agent_versions(*, agent: Agent) -> list[AgentVersion]:
    """The agent's published versions, newest first, with who published them."""
    return list(AgentVersion.objects.filter(agent=agent).select_related("published_by").order_by("-number"))


def agent_conversations_of_user(*, agent: Agent, user, limit: int = 20) -> list[Conversation]:
    """The user's own conversations with the agent, newest first (never another member's, nor a plan step's)."""
    conversations = Conversation.objects.filter(agent=agent, user=user, parent__isnull=True)
    return list(conversations.order_by("-updated_at")[:limit])


def agent_conversation_count(*, agent: Agent) -> int:
    """How many conversations (of every member) the agent has had."""
    return Conversation.objects.filter(agent=agent).count()

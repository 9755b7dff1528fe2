"""Reads of agents."""

from __future__ import annotations

from agents.models import Agent


def agent_list_for_planner(*, active_only: bool = True) -> list[Agent]:
    """The scope's agents with their names and descriptions, for the planner's list-agents tool."""
    agents = Agent.objects.only("id", "name", "description", "kind")
    if active_only:
        agents = agents.filter(active=True)
    return list(agents.order_by("name"))


def agent_get(*, agent_id: int) -> Agent:
    """The scope's agent `agent_id`; Agent.DoesNotExist for another tenant's id (never a leak)."""
    return Agent.objects.get(pk=agent_id)
